"""``GET /healthz``: whether the hub is well, and, for the admin, what it is
(boot id, NATS URL, schema version and the wire side's figures).

It is the one route the gate opens to a request without credentials
(``auth.OPEN``): load balancers and probes ask that way, and learn only
``{status}``: ``ok``, or ``degraded`` while a run is suspended or a
dispatch parked (handlers that failed past their retry budget wait for an
operator; the admin is told how many of each). A paused deployment degrades
nothing, nor does an asleep one (the admin is told how many there are,
``paused_deployments``, ``asleep_deployments``).
Still 200: the hub itself serves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...store import LATEST, asleep_deployments, count_failures, paused_deployments
from ..auth import OPEN_PATH
from ..context import RouteContext
from ..responses import json_response

HealthExtra = Callable[[], Mapping[str, Any]]


def health_routes(ctx: RouteContext, boot_id: str, extra: HealthExtra | None) -> list[Route]:
    """``extra()`` adds to what the admin is told."""

    async def healthz(request: Request) -> Response:
        added = dict(extra()) if extra is not None else {}
        failures = await ctx.store.read(count_failures)
        suspended = sum(failures["suspended"].values())
        parked = sum(failures["parked"].values())
        paused = len(await ctx.store.read(paused_deployments))
        asleep = len(await ctx.store.read(asleep_deployments))
        # The wire side's report has a status of its own (undeliverable or
        # stuck dispatches): either one degrades the hub.
        wire_ok = added.pop("status", "ok") == "ok"
        status = "ok" if wire_ok and not (suspended or parked) else "degraded"
        health = {"status": status, "boot_id": boot_id, "nats_url": ctx.settings.nats_url,
                  "schema_version": LATEST, "suspended_runs": suspended,
                  "parked_dispatches": parked, "paused_deployments": paused,
                  "asleep_deployments": asleep, **added}  # fmt: skip
        if not getattr(request.state, "admin", False):
            health = {"status": health["status"]}
        return json_response(health)

    return [Route(OPEN_PATH, healthz, methods=["GET"])]
