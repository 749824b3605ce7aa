"""The hub's HTTP API (DESIGN section 8): a Starlette app, JSON via msgspec.

Every error is ``{"status", "reason", "detail"}`` (``responses``), an
unexpected one included: a bug answers 500 ``internal_error`` and its
traceback goes to the log, never to the client. Every route but
``/healthz`` is the admin's (``auth``). The routes that accept triggers
(``triggers``: mail, signals) and approvals (``approvals``) have modules of
their own, as does the web console at ``/`` (``console``); deployments,
runs, dispatches and the hub's health are here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import HubError, InvalidDeployment, InvalidRequest
from ..store import (
    LATEST,
    Acceptor,
    DeploymentView,
    OutboundStatus,
    Store,
    create_deployment,
    delete_deployment,
    get_deployment,
    get_dispatch,
    get_run,
    list_deployments,
    list_outbound,
    list_runs,
    resolve_deployment,
)
from .approvals import approval_routes
from .auth import AdminAuth
from .console import console_routes
from .context import ApiSettings as ApiSettings
from .context import RouteContext, query_limit
from .events import event_routes
from .feed import ChangeFeed
from .lane import MailAnswers, MailLane
from .metrics import render_metrics
from .producers import producer_routes
from .replay import replay_routes
from .requests import DeploymentIn
from .responses import error_response, hub_error_response, json_response
from .triggers import trigger_routes
from .versions import version_routes


def create_app(
    *,
    store: Store,
    acceptor: Acceptor,
    settings: ApiSettings,
    admin_token: str,
    boot_id: str,
    health_extra: Callable[[], Mapping[str, Any]] | None = None,
    deployment_extra: Callable[[str], Mapping[str, Any]] | None = None,
    on_deleted: Callable[[str], object] | None = None,
    on_rollout: Callable[[str], object] | None = None,
    metrics_extra: Callable[[], str] | None = None,
    events: ChangeFeed | None = None,
) -> Starlette:
    """The HTTP API over ``store``, for holders of ``admin_token``; triggers go
    through ``acceptor``.

    ``health_extra`` adds to ``/healthz``; ``deployment_extra(id)`` adds the
    wire side's live view (``connected``, ``last_error``) to a deployment;
    ``on_deleted(id)`` ends a deleted deployment's sessions at once;
    ``on_rollout(id)`` has its sidecar load a version asked for at once;
    ``events`` serves ``GET /events`` (None: it answers 503)."""
    ctx = RouteContext(store, acceptor, settings)
    answers = MailAnswers(ctx, token=admin_token)

    async def healthz(request: Request) -> Response:
        extra = dict(health_extra()) if health_extra is not None else {}
        health = {"status": "ok", "boot_id": boot_id, "nats_url": settings.nats_url,
                  "schema_version": LATEST, **extra}  # fmt: skip
        if not getattr(request.state, "admin", False):
            # Load balancers and probes ask without credentials: they learn
            # whether the hub is well, nothing about what it runs.
            health = {"status": health["status"]}
        return json_response(health)

    async def post_deployment(request: Request) -> Response:
        spec = await ctx.read(request, DeploymentIn, InvalidDeployment)
        created = await create_deployment(
            store,
            name=spec.name,
            entrypoint=spec.entrypoint,
            source=spec.source,
            files=spec.files,
            domain=settings.domain,
            nats_url=settings.nats_url,
            subject_prefix=settings.subject_prefix,
            sidecar_root=settings.sidecar_root,
        )
        view = msgspec.to_builtins(
            await store.read(partial(get_deployment, key=created.deployment_id))
        )
        view["join_token"] = created.join_token
        view["restore_record"] = created.restore_record
        return json_response(view, 201)

    def live(view: DeploymentView) -> DeploymentView:
        if deployment_extra is None:
            return view
        return msgspec.structs.replace(view, **deployment_extra(view.id))

    async def get_deployments(request: Request) -> Response:
        status = request.query_params.get("status")
        found = await store.read(partial(list_deployments, status=status))
        return json_response({"deployments": [live(d) for d in found]})

    async def one_deployment(request: Request) -> Response:
        dep_id = await store.read(partial(resolve_deployment, key=str(request.path_params["key"])))
        deleted = request.method == "DELETE" and await delete_deployment(
            store, dep_id, sidecar_root=settings.sidecar_root
        )
        if deleted and on_deleted is not None:
            on_deleted(dep_id)
        return json_response(live(await store.read(partial(get_deployment, key=dep_id))))

    async def runs(request: Request) -> Response:
        limit = query_limit(request)
        deployment = request.query_params.get("deployment") or None
        found = await store.read(partial(list_runs, deployment=deployment, limit=limit))
        return json_response({"runs": found})

    async def outbox(request: Request) -> Response:
        limit = query_limit(request)
        status = request.query_params.get("status") or None
        if status is not None and status not in set(OutboundStatus):
            raise InvalidRequest(f"'status' must be one of {', '.join(OutboundStatus)}")
        deployment = request.query_params.get("deployment") or None
        dep_id = (
            await store.read(partial(resolve_deployment, key=deployment)) if deployment else None
        )
        found = await store.read(
            partial(list_outbound, status=status, deployment_id=dep_id, limit=limit)
        )
        return json_response({"outbox": found})

    async def one_run(request: Request) -> Response:
        return json_response(
            await store.read(partial(get_run, run_id=str(request.path_params["id"])))
        )

    async def one_dispatch(request: Request) -> Response:
        return json_response(
            await store.read(partial(get_dispatch, dispatch_id=str(request.path_params["id"])))
        )

    async def metrics(request: Request) -> Response:
        text = await render_metrics(store, acceptor)
        if metrics_extra is not None:
            text += metrics_extra()
        if events is not None:
            text += events.metrics()
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def hub_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HubError)
        return hub_error_response(exc)

    async def unexpected(request: Request, exc: Exception) -> Response:
        # The exception goes on to the server, which logs its traceback; the
        # client learns only that the fault was not its own.
        return hub_error_response(HubError("the hub failed to answer this request"))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        reason = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, "error", reason, str(exc.detail))

    app = Starlette(
        routes=[
            *console_routes(ctx, live),
            Route("/healthz", healthz, methods=["GET"]),
            *trigger_routes(ctx),
            Route("/workflows/deployments", post_deployment, methods=["POST"]),
            Route("/workflows/deployments", get_deployments, methods=["GET"]),
            Route("/workflows/deployments/{key}", one_deployment, methods=["GET", "DELETE"]),
            *version_routes(ctx, on_rollout or (lambda dep_id: None)),
            Route("/runs", runs, methods=["GET"]),
            Route("/runs/{id}", one_run, methods=["GET"]),
            *replay_routes(ctx),
            Route("/dispatches/{id}", one_dispatch, methods=["GET"]),
            *approval_routes(ctx),
            Route("/outbox", outbox, methods=["GET"]),
            *producer_routes(ctx),
            Route("/metrics", metrics, methods=["GET"]),
            *event_routes(ctx, events),
        ],
        middleware=[
            Middleware(AdminAuth, token=admin_token),
            Middleware(MailLane, answers=answers),
        ],
        exception_handlers={
            HubError: hub_error,
            HTTPException: http_error,
            Exception: unexpected,
        },
    )
    # The HTTP server answers most mail itself, with these (lane.py).
    app.state.mail_answers = answers
    return app
