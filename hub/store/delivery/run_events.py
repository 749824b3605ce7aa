"""What a run's events write: each recorded once by its id, each applied to
its run (started, finished, suspended, waiting on an approval, a child named).

The rules are the wire's (``hub.wire.events``); these are its statements.
An event's id is the sidecar's, so recording one that is there already
changes nothing, and whoever records it applies it. A finished run is
final: only a run that is not terminal yet takes a terminal status (the
statuses come from the classifier, ``runtime.is_terminal``), and its
pending timers go with it.
"""

from __future__ import annotations

from typing import NamedTuple

from runtime import RunStatus, is_terminal

from ..clock import APPROVAL_EXPIRY, drop_run_timers, set_timer
from ..schema import ApprovalStatus
from ..sql import Tx, sql

_NOT_TERMINAL = tuple(s.value for s in RunStatus if not is_terminal(s))


class EventRun(NamedTuple):
    """A run of the deployment, as applying an event to it reads it."""

    status: str
    last_seq: int
    last_step: int
    parent_run_id: str | None


_RUN = sql(
    "SELECT status, last_seq, last_step, parent_run_id FROM workflow_run WHERE id = ?"
    " AND deployment_id = ? AND is_anchor = 0"
)
_RECORD = sql(
    "INSERT OR IGNORE INTO run_event (id, run_id, deployment_id, kind, payload, at)"
    " VALUES (?, ?, ?, ?, ?, ?)",
    postgres="INSERT INTO run_event (id, run_id, deployment_id, kind, payload, at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
)
_START = sql("UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ? AND status = ?")
# The IN list has the classifier's fixed length: declared once, at import.
_FINISH = sql(
    "UPDATE workflow_run SET status = ?, result = ?, error = ?, updated_at = ?"
    f" WHERE id = ? AND status IN ({', '.join('?' * len(_NOT_TERMINAL))})"
)
# A run that ended stays ended: only a live one is suspended.
_SUSPEND = sql(
    "UPDATE workflow_run SET status = ?, suspended_at = ?, failing_dispatch_id = ?, error = ?,"
    f" updated_at = ? WHERE id = ? AND status IN ({', '.join('?' * len(_NOT_TERMINAL))})"
)
_ENTRYPOINT = sql(
    "UPDATE workflow_run SET entrypoint = ? WHERE id = ? AND parent_run_id = ?"
    " AND deployment_id = ?"
)
_APPROVAL = sql(
    "INSERT OR IGNORE INTO approval (id, run_id, prompt, status, created_at, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?)",
    postgres="INSERT INTO approval (id, run_id, prompt, status, created_at, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
)
_WAITING = sql(
    "UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ? AND status IN (?, ?)"
)
_ADDRESS = sql("SELECT address FROM deployment WHERE id = ?")


def event_run(tx: Tx, run_id: str, deployment_id: str) -> EventRun | None:
    """The run an event names, if it is one of the deployment's own runs."""
    row = tx.fetch_one(_RUN, (run_id, deployment_id))
    return None if row is None else EventRun(*row)


def record_event(
    tx: Tx,
    event_id: str,
    run_id: str,
    deployment_id: str,
    kind: str,
    payload: bytes | None,
    at: float,
) -> bool:
    """Record an event under its id; False when it was recorded before."""
    params = (event_id, run_id, deployment_id, kind, payload, at)
    return tx.execute(_RECORD, params) == 1


def start_run(tx: Tx, run_id: str, now: float) -> None:
    """pending -> running; any later status stays as it is."""
    tx.execute(_START, (RunStatus.RUNNING, now, run_id, RunStatus.PENDING))


def finish_run(
    tx: Tx, run_id: str, status: RunStatus, result: str | None, error: str | None, now: float
) -> bool:
    """Give a run that is not terminal yet its terminal ``status`` (its
    ``result`` as JSON text), and drop its pending timers; whether it took it."""
    params = (status, result, error, now, run_id, *_NOT_TERMINAL)
    if tx.execute(_FINISH, params) != 1:
        return False
    drop_run_timers(tx, [run_id])
    return True


def suspend_run(
    tx: Tx, run_id: str, dispatch_id: str, error: str | None, at: float, now: float
) -> bool:
    """A run that is not terminal yet becomes ``suspended`` (since ``at``) on
    ``dispatch_id``, which failed with ``error``; whether it did."""
    params = (RunStatus.SUSPENDED, at, dispatch_id, error, now, run_id, *_NOT_TERMINAL)
    return tx.execute(_SUSPEND, params) == 1


def name_child_entrypoint(
    tx: Tx, child_run_id: str, parent_run_id: str, deployment_id: str, entrypoint: str
) -> bool:
    """Give the child minted for a spawn its entrypoint; False when no run
    of the deployment is that parent's child."""
    params = (entrypoint, child_run_id, parent_run_id, deployment_id)
    return tx.execute(_ENTRYPOINT, params) == 1


def ask_approval(
    tx: Tx,
    approval_id: str,
    run_id: str,
    prompt: str | None,
    now: float,
    *,
    deployment_id: str = "",
    expires_at: float | None = None,
    expiry_id: str = "",
) -> bool:
    """Record a pending approval (once, by its id); a live run waits on it.
    With ``expires_at``, its expiry is a timer of the run (id ``expiry_id``),
    which decides it ``timeout`` then. Whether it expires."""
    params = (approval_id, run_id, prompt, ApprovalStatus.PENDING, now, expires_at)
    expires = tx.execute(_APPROVAL, params) == 1 and expires_at is not None
    if expires and expires_at is not None:
        set_timer(
            tx,
            timer_id=expiry_id or approval_id,
            deployment_id=deployment_id,
            run_id=run_id,
            kind=APPROVAL_EXPIRY,
            name=approval_id,
            due_at=expires_at,
            payload=None,
            now=now,
        )
    waiting = (RunStatus.WAITING, now, run_id, RunStatus.PENDING, RunStatus.RUNNING)
    tx.execute(_WAITING, waiting)
    return expires


def deployment_address(tx: Tx, deployment_id: str) -> str | None:
    """The deployment's mail address (the sender of the mail its runs send)."""
    row = tx.fetch_one(_ADDRESS, (deployment_id,))
    return None if row is None else row[0]
