"""The hub's HTTP API (docs/design.md section 8): the Starlette app, its routing
table and the middleware in front of it.

Every route comes from a route module (``routes``, ``console``,
``events``, and ``mail`` for the two mail paths), every request passes the
one gate (``auth``), and every error is ``{"status", "reason", "detail"}``
(``responses``), an unexpected one included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware

from ..intake import Acceptor
from ..store import DeploymentView, Store
from .auth import AdminAuth, Gate
from .console import console_routes
from .context import ApiSettings as ApiSettings
from .context import RouteContext
from .events import ChangeFeed, event_routes
from .mail import MailAnswers
from .responses import EXCEPTION_HANDLERS
from .routes import (
    approval_routes,
    deployment_routes,
    failure_routes,
    health_routes,
    metrics_routes,
    producer_routes,
    replay_routes,
    run_routes,
    schedule_routes,
    trigger_routes,
    version_routes,
)


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
    on_policy: Callable[[str], object] | None = None,
    on_schedules: Callable[[], object] | None = None,
    metrics_extra: Callable[[], str] | None = None,
    events: ChangeFeed | None = None,
    wakes: Callable[[float, str | None], Awaitable[tuple[list[str], str]]] | None = None,
) -> Starlette:
    """The HTTP API over ``store``, for holders of ``admin_token``; triggers go
    through ``acceptor``.

    ``health_extra`` adds to ``/healthz``; ``deployment_extra(id)`` adds the
    wire side's live view (``connected``, ``last_error``) to a deployment;
    ``on_deleted(id)`` ends a deleted deployment's sessions at once;
    ``on_rollout(id)`` has its sidecar load a version asked for at once;
    ``on_policy(id)`` sends its sidecar a changed failure policy;
    ``on_schedules()`` wakes the schedule loop after a schedule is added or removed;
    ``wakes(wait, cursor)`` answers ``GET /workflows/wakes`` (the wire side's long poll);
    ``events`` serves ``GET /events`` (None: it answers 503)."""
    ctx = RouteContext(store, acceptor, settings)
    gate = Gate(admin_token)
    answers = MailAnswers(ctx, gate=gate)

    def live(view: DeploymentView) -> DeploymentView:
        if deployment_extra is None:
            return view
        return msgspec.structs.replace(view, **deployment_extra(view.id))

    app = Starlette(
        routes=[
            *console_routes(ctx, live),
            *health_routes(ctx, boot_id, health_extra),
            *answers.routes(),
            *trigger_routes(ctx),
            *deployment_routes(ctx, live, on_deleted, on_policy, wakes),
            *version_routes(ctx, on_rollout or (lambda dep_id: None)),
            *schedule_routes(ctx, on_schedules),
            *run_routes(ctx),
            *failure_routes(ctx),
            *replay_routes(ctx),
            *approval_routes(ctx),
            *producer_routes(ctx),
            *metrics_routes(ctx, metrics_extra, events.metrics if events else None),
            *event_routes(ctx, events),
        ],
        middleware=[Middleware(AdminAuth, gate=gate)],
        exception_handlers=EXCEPTION_HANDLERS,
    )
    # A path with a slash too many is not found, not redirected: the API's
    # paths are exact.
    app.router.redirect_slashes = False
    # The HTTP server answers most mail itself, with these (mail.py).
    app.state.mail_answers = answers
    return app
