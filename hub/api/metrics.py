"""``GET /metrics``: Prometheus text exposition of the hub's counters."""

from __future__ import annotations

from runtime import Connection

from ..store import Acceptor, count_by_status, count_outbound


def _family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


def _label(key: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{{{key}="{escaped}"}}'


async def render_metrics(db: Connection, acceptor: Acceptor) -> str:
    counts = await count_by_status(db)
    outbound = await count_outbound(db)
    lines: list[str] = []
    lines += _family(
        "mailrun_triggers_accepted_total", "counter",
        "Triggers accepted since the hub started (duplicates excluded).",
        [("", acceptor.counts["accepted"])],
    )  # fmt: skip
    lines += _family(
        "mailrun_triggers_duplicate_total", "counter",
        "Triggers answered with the first receipt of their message_id.",
        [("", acceptor.counts["duplicate"])],
    )  # fmt: skip
    lines += _family(
        "mailrun_triggers_rejected_total", "counter",
        "Triggers rejected since the hub started, by reason.",
        [(_label("reason", r), n) for r, n in sorted(acceptor.rejected.items())],
    )  # fmt: skip
    lines += _family(
        "mailrun_triggers_failed_total", "counter",
        "Triggers that could not be stored (the caller got an error).",
        [("", acceptor.counts["failed"])],
    )  # fmt: skip
    lines += _family(
        "mailrun_accept_batches_total", "counter",
        "Accept transactions committed (group commit: many triggers each).",
        [("", acceptor.counts["batches"])],
    )  # fmt: skip
    lines += _family(
        "mailrun_dispatches", "gauge", "Dispatches in the store, by status.",
        [(_label("status", s), n) for s, n in sorted(counts["dispatches"].items())],
    )  # fmt: skip
    lines += _family(
        "mailrun_deployments", "gauge", "Deployments in the store, by status.",
        [(_label("status", s), n) for s, n in sorted(counts["deployments"].items())],
    )  # fmt: skip
    lines += _family(
        "mailrun_outbound_mail", "gauge",
        "Mail runs sent to outside addresses, in the store, by status.",
        [(_label("status", s), n) for s, n in sorted(outbound.items())],
    )  # fmt: skip
    return "\n".join(lines) + "\n"
