"""``GET /metrics``: Prometheus text exposition of the hub's counters."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...intake import Acceptor
from ...metrics import family, label
from ...store import (
    Store,
    asleep_deployments,
    count_by_status,
    count_failures,
    count_outbound,
    count_quarantined,
    count_timers,
    paused_deployments,
)
from ..context import RouteContext

MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(key: str, value: str) -> str:
    return "{" + label(key, value) + "}"


async def render_metrics(store: Store, acceptor: Acceptor) -> str:
    counts = await store.read(count_by_status)
    outbound = await store.read(count_outbound)
    lines: list[str] = []
    lines += family(
        "mailrun_triggers_accepted_total", "counter",
        "Triggers accepted since the hub started (duplicates excluded).",
        [("", acceptor.counts["accepted"])],
    )  # fmt: skip
    lines += family(
        "mailrun_triggers_duplicate_total", "counter",
        "Triggers answered with the first receipt of their message_id.",
        [("", acceptor.counts["duplicate"])],
    )  # fmt: skip
    lines += family(
        "mailrun_triggers_rejected_total", "counter",
        "Triggers rejected since the hub started, by reason.",
        [(_label("reason", r), n) for r, n in sorted(acceptor.rejected.items())],
    )  # fmt: skip
    lines += family(
        "mailrun_triggers_failed_total", "counter",
        "Triggers that could not be stored (the caller got an error).",
        [("", acceptor.counts["failed"])],
    )  # fmt: skip
    lines += family(
        "mailrun_accept_batches_total", "counter",
        "Accept transactions committed (group commit: many triggers each).",
        [("", acceptor.counts["batches"])],
    )  # fmt: skip
    lines += family(
        "mailrun_dispatches", "gauge", "Dispatches in the store, by status.",
        [(_label("status", s), n) for s, n in sorted(counts["dispatches"].items())],
    )  # fmt: skip
    lines += family(
        "mailrun_deployments", "gauge", "Deployments in the store, by status.",
        [(_label("status", s), n) for s, n in sorted(counts["deployments"].items())],
    )  # fmt: skip
    lines += family(
        "mailrun_outbound_mail", "gauge",
        "Mail runs sent to outside addresses, in the store, by status.",
        [(_label("status", s), n) for s, n in sorted(outbound.items())],
    )  # fmt: skip
    # Quarantined envelopes are kept (exempt from the dead letters' caps):
    # counted from the store, they survive a hub restart.
    quarantined = await store.read(count_quarantined)
    lines += family(
        "mailrun_deployment_quarantined_total", "counter",
        "Envelopes the deployment's sidecar could not read, set aside (their dispatch cancelled).",
        [(_label("deployment", dep), n) for dep, n in quarantined.items()],
    )  # fmt: skip
    paused = await store.read(paused_deployments)
    lines += family(
        "mailrun_deployment_paused", "gauge",
        "1 for each deployment that is paused (what it takes is kept, not delivered).",
        [(_label("deployment", dep), 1) for dep in paused],
    )  # fmt: skip
    # From the store: with several hubs, another may have granted the Sleep.
    asleep = await store.read(asleep_deployments)
    lines += family(
        "mailrun_deployments_asleep", "gauge",
        "Deployments whose sidecar is asleep (scale to zero: started again by their next item).",
        [("", len(asleep))],
    )  # fmt: skip
    # What waits for an operator: counted through partial indexes (few rows).
    failures = await store.read(count_failures)
    lines += family(
        "mailrun_runs_suspended", "gauge",
        "Runs suspended on an item that failed past its retry budget, by deployment.",
        [(_label("deployment", dep), n) for dep, n in sorted(failures["suspended"].items())],
    )  # fmt: skip
    lines += family(
        "mailrun_dispatches_parked", "gauge",
        "Dispatches parked after failing past their retry budget, by deployment.",
        [(_label("deployment", dep), n) for dep, n in sorted(failures["parked"].items())],
    )  # fmt: skip
    timers = {"timer": 0, "approval": 0} | await store.read(count_timers)
    lines += family(
        "mailrun_timers_pending", "gauge",
        "Timers waiting to fire, by kind (timer: ctx.set_timer; approval: an approval's expiry).",
        [(_label("kind", k), n) for k, n in sorted(timers.items())],
    )  # fmt: skip
    return "\n".join(lines) + "\n"


def metrics_routes(ctx: RouteContext, *extra: Callable[[], str] | None) -> list[Route]:
    """``GET /metrics``: the store's and acceptor's families, then each ``extra()``'s."""

    async def metrics(request: Request) -> Response:
        text = await render_metrics(ctx.store, ctx.acceptor)
        text += "".join(more() for more in extra if more is not None)
        return Response(text, media_type=MEDIA_TYPE)

    return [Route("/metrics", metrics, methods=["GET"])]
