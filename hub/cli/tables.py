"""Human output for the CLI: aligned tables and key/value blocks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

EMPTY = "-"


def cell(value: object) -> str:
    """One value as a table cell: short, single-line, '-' for nothing."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value > 1e9:
        # Epoch seconds: an operator reads a UTC timestamp, not a float.
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, dict | list):
        return msgspec.json.encode(value).decode()
    return " ".join(str(value).split())


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns two spaces apart; a header line and one line per row."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = [list(headers), *cells]
    return "\n".join(
        "  ".join(text.ljust(widths[i]) for i, text in enumerate(line)).rstrip() for line in lines
    )


def key_values(pairs: Sequence[tuple[str, object]]) -> str:
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.ljust(width)}  {cell(v)}" for k, v in pairs)


def seconds(value: object) -> str:
    """A duration as ``12.3s``; '-' for none (or nothing waiting)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return EMPTY
    return f"{value:.1f}s"


def deployments_table(deployments: Sequence[Mapping[str, Any]]) -> str:
    """PENDING: accepted, not yet delivered to the sidecar; OLDEST-WAIT: how long
    the oldest of those has waited; UNPROCESSED: delivered or not, not yet processed;
    STUCK: sent again for not being processed, and still not processed;
    QUARANTINED: envelopes the sidecar could not read (see the hub's dead letters)."""
    return table(
        [
            "NAME",
            "ID",
            "STATUS",
            "ADDRESS",
            "CONNECTED",
            "PENDING",
            "OLDEST-WAIT",
            "UNPROCESSED",
            "STUCK",
            "QUARANTINED",
        ],
        [
            [
                d.get("name"),
                d.get("id"),
                d.get("status"),
                d.get("address"),
                d.get("connected"),
                d.get("pending"),
                seconds(d.get("oldest_wait")),
                d.get("pending_dispatches"),
                d.get("stuck"),
                d.get("quarantined"),
            ]
            for d in deployments
        ],
    )


def runs_table(runs: Sequence[Mapping[str, Any]]) -> str:
    return table(
        ["ID", "DEPLOYMENT", "STATUS", "TOP-LEVEL", "UPDATED", "FAILING"],
        [
            [
                r.get("id"),
                r.get("deployment_name") or r.get("deployment_id"),
                r.get("status"),
                r.get("is_top_level"),
                r.get("updated_at"),
                _failing(r),
            ]
            for r in runs
        ],
    )


def _failing(run: Mapping[str, Any]) -> str | None:
    """A suspended run's failing dispatch and error, in short."""
    if not run.get("failing_dispatch_id"):
        return None
    return f"{run['failing_dispatch_id']}: {_short(run.get('error'))}"


def approvals_table(approvals: Sequence[Mapping[str, Any]]) -> str:
    """RUN-STATUS: a pending approval of a run that ended is never decided."""
    return table(
        ["ID", "RUN", "STATUS", "DECISION", "RUN-STATUS", "CREATED", "PROMPT"],
        [
            [
                a.get("id"),
                a.get("run_id"),
                a.get("status"),
                a.get("decision"),
                a.get("run_status"),
                a.get("created_at"),
                _short(a.get("prompt")),
            ]
            for a in approvals
        ],
    )


def outbox_table(mails: Sequence[Mapping[str, Any]]) -> str:
    return table(
        ["ID", "TO", "SUBJECT", "STATUS", "ATTEMPTS", "LAST ERROR / RELAY ANSWER"],
        [
            [
                m.get("id"),
                m.get("to"),
                m.get("subject"),
                f"{m.get('status')}{' (in doubt)' if m.get('in_doubt') else ''}",
                m.get("attempts"),
                _outbox_outcome(m),
            ]
            for m in mails
        ],
    )


def _outbox_outcome(mail: Mapping[str, Any]) -> object:
    status = mail.get("status")
    if status == "sent":
        return mail.get("relay_answer")
    if status == "bounced":
        source, code = mail.get("bounce_source"), mail.get("bounce_status")
        return f"{source} {code}: {mail.get('bounce_diagnostic')}"
    return mail.get("last_error")


def _short(text: object, width: int = 60) -> object:
    """A long prompt cut to one table cell's width."""
    if not isinstance(text, str):
        return text
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def deployment_view(d: Mapping[str, Any]) -> str:
    keys = [
        "id",
        "name",
        "address",
        "status",
        "entrypoint",
        "version",
        "rollout_version",
        "top_level_run_id",
        "connected",
        "pending",
        "oldest_wait",
        "last_error",
        "pending_dispatches",
        "quarantined",
        "on_failure",
        "max_attempts",
        "max_backoff",
        "handler_timeout",
        "max_concurrent_runs",
        "mail",
        "paused_at",
        "asleep_since",
        "owner_epoch",
        "created_at",
        "deleted_at",
    ]
    shown = {**d, "mail": mail_line(d["mail"])} if isinstance(d.get("mail"), Mapping) else d
    return key_values([(k, shown.get(k)) for k in keys if k in shown])


def mail_line(mail: Mapping[str, Any]) -> str:
    """A deployment's mail settings on one line: those not at their default."""
    parts = [f"{k}={','.join(v)}" for k in ("allow_from", "deny_from") if (v := mail.get(k))]
    parts += [k for k in ("require_dmarc", "catch_all") if mail.get(k)]
    if mail.get("replies_to_ended", "top_level") != "top_level":
        parts.append(f"replies_to_ended={mail['replies_to_ended']}")
    return " ".join(parts) or "defaults"


def version_line(v: Mapping[str, Any]) -> str:
    """One version: what an update or a rollback printed."""
    state = "active" if v.get("active") else v.get("status")
    text = f"{v.get('deployment_id')} version {v.get('version')}: {state}"
    if v.get("status") == "loading":
        text += " (its sidecar has not loaded it yet; it becomes active once it has)"
    return text


def versions_table(versions: Sequence[Mapping[str, Any]]) -> str:
    """STATUS: loading (asked for), ready (loaded), refused (ERROR says why),
    superseded (another version was asked for first); ACTIVE marks the one
    new items are stamped with."""
    return table(
        ["VERSION", "ACTIVE", "STATUS", "ENTRYPOINT", "DIGEST", "CREATED", "ERROR"],
        [
            [
                v.get("version"),
                "*" if v.get("active") else "",
                v.get("status"),
                v.get("entrypoint"),
                str(v.get("digest") or "")[:19],
                v.get("created_at"),
                v.get("error"),
            ]
            for v in versions
        ],
    )


def run_view(r: Mapping[str, Any]) -> str:
    keys = [
        "id",
        "deployment_id",
        "parent_run_id",
        "is_top_level",
        "status",
        "failing_dispatch_id",
        "suspended_at",
        "result",
        "error",
        "state",
        "last_seq",
        "created_at",
        "updated_at",
    ]
    # A suspension's fields only while it is suspended: None says nothing.
    shown = [(k, r.get(k)) for k in keys if k in r]
    pairs = [(k, v) for k, v in shown if v is not None or k in _ALWAYS]
    if timers := r.get("timers"):
        # Pending ones only (the hub lists those): name and when it is due.
        due = [f"{t.get('name')} at {cell(t.get('due_at'))}" for t in timers]
        pairs.append(("timers", ", ".join(due)))
    return key_values(pairs)


_ALWAYS = {"id", "deployment_id", "parent_run_id", "is_top_level", "status", "result",
           "error", "state", "last_seq", "created_at", "updated_at"}  # fmt: skip


def parked_table(dispatches: Sequence[Mapping[str, Any]]) -> str:
    """Dispatches with their handler's error (``mailrun parked``, ``retry``)."""
    return table(
        ["ID", "DEPLOYMENT", "RUN", "SEQ", "STATUS", "SUBJECT", "ERROR"],
        [
            [
                d.get("id"),
                d.get("deployment_id"),
                d.get("run_id"),
                d.get("seq"),
                d.get("status"),
                _short(d.get("subject")),
                _short(d.get("error")),
            ]
            for d in dispatches
        ],
    )


def receipt_view(r: Mapping[str, Any]) -> str:
    keys = ["status", "dispatch_id", "run_id", "deployment_id", "reason", "detail"]
    return key_values([(k, r.get(k)) for k in keys if k in r])
