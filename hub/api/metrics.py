"""``GET /metrics``: Prometheus text exposition of the hub's counters."""

from __future__ import annotations

from ..metrics import family, label
from ..store import QUARANTINE_SOURCE, Acceptor, Store, count_by_status, count_outbound, fetch_all


def _label(key: str, value: str) -> str:
    return "{" + label(key, value) + "}"


_QUARANTINED = "SELECT deployment_id, COUNT(*) FROM dead_letter WHERE source = ? GROUP BY 1"


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
    quarantined = await fetch_all(store.db, _QUARANTINED, (QUARANTINE_SOURCE,))
    lines += family(
        "mailrun_deployment_quarantined_total", "counter",
        "Envelopes the deployment's sidecar could not read, set aside (their dispatch cancelled).",
        [(_label("deployment", r[0] or ""), r[1]) for r in quarantined],
    )  # fmt: skip
    return "\n".join(lines) + "\n"
