"""The routes of deployments: ``POST|GET /workflows/deployments``,
``GET|PATCH|DELETE /workflows/deployments/{id or name}``,
``POST /workflows/deployments/{id or name}/pause|unpause`` and
``GET /workflows/wakes`` (the asleep deployments that have work).

A new deployment's address is ``name@domain``: the hub's first mail domain,
or the one of its domains the creation names (``domain``; 422 for another).

``PATCH`` changes the deployment's failure policy (any of ``on_failure``,
``max_attempts``, ``max_backoff``, ``handler_timeout``), its
``max_concurrent_runs`` and its ``mail`` settings (``hub.store.mail``), checked
whole before anything is written, in one transaction; once committed, its
sidecar is told (``on_policy``). A pause keeps what the
deployment takes undelivered until it is unpaused; an unpause wakes the
dispatcher for it, as an accept does.

``GET /workflows/deployments?changed_after=C`` lists only the deployments
changed after the answer that gave ``cursor`` C (0: all of them), with the
next ``cursor`` and ``whole`` (true when it had to list all: C's changes
were trimmed, or C is not this database's): what ``mailrun up`` asks every
half second (``hub.store.deployments_changed``).

A deployment whose sidecar fell asleep (scale to zero) is shown ``asleep``
(``paused`` first), with ``asleep_since``; ``GET /workflows/wakes?wait=S``
names those that have work (a reserved dispatch, a wake requested), at
once when there are any, else as soon as one does, within ``S`` seconds
(0 to 30): what ``mailrun up`` starts again. Its answer's ``cursor``, sent
back as ``?cursor=``, makes the next poll wait for news: work that came
since that answer, not the names it gave already.

A deployment is shown with the wire side's live view (``connected``,
``last_error``: the ``live`` the app is given); the answer to its creation
alone carries its ``join_token`` and where its restore record was written.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from functools import partial

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hub._errors import InvalidDeployment, InvalidPolicy, InvalidRequest
from hub.store import (
    DeploymentView,
    Tx,
    create_deployment,
    delete_deployment,
    deployments_changed,
    deployments_to_wake,
    get_deployment,
    list_deployments,
    pause_deployment,
    resolve_deployment,
    set_mail_settings,
    set_policy,
    unpause_deployment,
)

from ...context import ApiSettings, RouteContext
from ...requests import DeploymentIn, PolicyIn
from ...responses import json_response

Live = Callable[[DeploymentView], DeploymentView]
Wakes = Callable[[float, str | None], Awaitable[tuple[list[str], str]]]
"""``wakes(wait, cursor)``: the asleep deployments with work, waiting up to
``wait`` s (for news since ``cursor``'s answer, when it is given), and the
answer's cursor."""
MAX_CURSOR = 64

MAX_WAKE_WAIT = 30.0


def _wait(request: Request) -> float:
    """``?wait=``: seconds from 0 to 30, else 422."""
    text = request.query_params.get("wait", "0")
    try:
        wait = float(text)
    except ValueError:
        wait = math.nan
    if not 0.0 <= wait <= MAX_WAKE_WAIT:
        raise InvalidRequest(f"'wait' must be a number of seconds from 0 to {MAX_WAKE_WAIT:g}")
    return wait


def _changed_after(request: Request) -> int | None:
    """``?changed_after=``: a listing's cursor (0: none yet), else 422."""
    text = request.query_params.get("changed_after")
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        raise InvalidRequest("'changed_after' must be a listing's cursor: a whole number")
    return int(text)


def _domain(settings: ApiSettings, wanted: str | None) -> str:
    """The mail domain a new deployment gets: ``wanted`` if the hub has it."""
    if wanted is None:
        return settings.domain
    domains = (settings.domain, *settings.domains)
    if wanted.strip().lower() not in (d.lower() for d in domains):
        raise InvalidDeployment(
            f"domain {wanted[:100]!r} is not one of this hub's: {', '.join(domains)}"
        )
    return wanted.strip().lower()


def deployment_routes(
    ctx: RouteContext,
    live: Live,
    on_deleted: Callable[[str], object] | None,
    on_policy: Callable[[str], object] | None = None,
    wakes: Wakes | None = None,
) -> list[Route]:
    """``on_deleted(id)`` ends a deleted deployment's sessions at once;
    ``on_policy(id)`` sends a changed policy to its sidecar; ``wakes``
    answers ``GET /workflows/wakes`` (None: from the store, without waiting)."""
    store, settings = ctx.store, ctx.settings

    async def post_deployment(request: Request) -> Response:
        spec = await ctx.read(request, DeploymentIn, InvalidDeployment)
        created = await create_deployment(
            store,
            name=spec.name,
            entrypoint=spec.entrypoint,
            source=spec.source,
            files=spec.files,
            domain=_domain(settings, spec.domain),
            nats_url=settings.nats_url,
            subject_prefix=settings.subject_prefix,
            sidecar_root=settings.sidecar_root,
            policy=spec.policy(),
            mail=spec.mail,
        )
        view = msgspec.to_builtins(
            await store.read(partial(get_deployment, key=created.deployment_id))
        )
        view["join_token"] = created.join_token
        view["restore_record"] = created.restore_record
        return json_response(view, 201)

    async def get_deployments(request: Request) -> Response:
        status = request.query_params.get("status")
        after = _changed_after(request)
        if after is None:
            found = await store.read(partial(list_deployments, status=status))
            return json_response({"deployments": [live(d) for d in found]})
        if status is not None:
            raise InvalidRequest("'changed_after' lists every status: it takes no 'status'")
        changed = await store.read(partial(deployments_changed, after=after, shared=store.shared))
        views = [live(d) for d in changed.deployments]
        return json_response(
            {"deployments": views, "cursor": changed.cursor, "whole": changed.whole}
        )

    async def one_deployment(request: Request) -> Response:
        dep_id = await store.read(partial(resolve_deployment, key=str(request.path_params["key"])))
        deleted = request.method == "DELETE" and await delete_deployment(
            store, dep_id, sidecar_root=settings.sidecar_root
        )
        if deleted and on_deleted is not None:
            on_deleted(dep_id)
        return json_response(live(await store.read(partial(get_deployment, key=dep_id))))

    async def patch_deployment(request: Request) -> Response:
        dep_id = await store.read(partial(resolve_deployment, key=str(request.path_params["key"])))
        change = await ctx.read(request, PolicyIn, InvalidPolicy, 64 * 1024)

        def body(tx: Tx) -> None:
            set_policy(tx, dep_id, change.policy())
            if change.mail is not None:
                set_mail_settings(tx, dep_id, change.mail)

        await store.transact(body)
        if on_policy is not None:
            on_policy(dep_id)
        return json_response(live(await store.read(partial(get_deployment, key=dep_id))))

    async def pause(request: Request) -> Response:
        dep_id = await store.read(partial(resolve_deployment, key=str(request.path_params["key"])))
        await store.transact(partial(pause_deployment, deployment_id=dep_id))
        return json_response(live(await store.read(partial(get_deployment, key=dep_id))))

    async def unpause(request: Request) -> Response:
        dep_id = await store.read(partial(resolve_deployment, key=str(request.path_params["key"])))
        if await store.transact(partial(unpause_deployment, deployment_id=dep_id)):
            woken = ctx.acceptor.on_accepted
            if woken is not None and inspect.isawaitable(result := woken({dep_id})):
                await result
        return json_response(live(await store.read(partial(get_deployment, key=dep_id))))

    async def get_wakes(request: Request) -> Response:
        wait = _wait(request)
        if wakes is None:
            return json_response({"wake": await store.read(deployments_to_wake)})
        # Opaque: one this hub did not give (or too long to be one) is none.
        cursor = request.query_params.get("cursor")
        found, after = await wakes(wait, cursor if cursor and len(cursor) <= MAX_CURSOR else None)
        return json_response({"wake": found, "cursor": after})

    return [
        Route("/workflows/wakes", get_wakes, methods=["GET"]),
        Route("/workflows/deployments/{key}/pause", pause, methods=["POST"]),
        Route("/workflows/deployments/{key}/unpause", unpause, methods=["POST"]),
        Route("/workflows/deployments", post_deployment, methods=["POST"]),
        Route("/workflows/deployments/{key}", patch_deployment, methods=["PATCH"]),
        Route("/workflows/deployments", get_deployments, methods=["GET"]),
        Route("/workflows/deployments/{key}", one_deployment, methods=["GET", "DELETE"]),
    ]
