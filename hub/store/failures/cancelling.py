"""Runs cancelled from outside (``POST /runs/{id}/cancel``): a ``cancel``
item minted for the run through the one accept function, and, when it
terminates, the run (and its live children) ``cancelled`` at once.

A cancel is one transaction. Its item takes the run's next seq and is
delivered like any item; the sidecar takes it ahead of what a waiting or
suspended run holds, as it takes a ``resume``. Its message id is
``cancel:<run>`` (``terminate:<run>`` for one that terminates): a run is
cancelled once, and a second cancel of it, of either kind, is answered with
the first one's receipt, even once the run has ended. Those message ids are
reserved: mail and signals may not use them (``intake.reserved_message_id``).
"""

from __future__ import annotations

import time

import msgspec

from runtime import RunStatus, is_terminal
from runtime.wire import CANCEL_KIND

from ..._errors import AcceptFailed, HubError, UnknownRun, WorkflowRunTerminal, error_for
from ..accepting import Accepted, Trigger, accept_triggers
from ..clock import drop_run_timers
from ..sql import Tx, sql

_LIVE = tuple(s.value for s in RunStatus if not is_terminal(s))
_LIVE_MARKS = ", ".join("?" * len(_LIVE))

_RUN = sql("SELECT deployment_id, status FROM workflow_run WHERE id = ? AND is_anchor = 0")
_FIRST = sql(
    "SELECT id, seq FROM workflow_run_dispatch"
    " WHERE deployment_id = ? AND message_id IN (?, ?) AND kind = ? ORDER BY seq LIMIT 1"
)
_CANCELLED = sql(
    "UPDATE workflow_run SET status = ?, error = ?, suspended_at = NULL, updated_at = ?"
    f" WHERE id = ? AND status IN ({_LIVE_MARKS})"
)
_LIVE_CHILDREN = sql(
    f"SELECT id FROM workflow_run WHERE parent_run_id = ? AND status IN ({_LIVE_MARKS})"
)

PARENT_ENDED = "parent run ended"
"""The reason a child cancelled with its parent is given (as the sidecar gives it)."""


def cancel_message_ids(run_id: str) -> tuple[str, str]:
    """The message ids of a cancel of ``run_id``: without and with terminate."""
    return f"cancel:{run_id}", f"terminate:{run_id}"


def cancel_run(tx: Tx, run_id: str, reason: str, terminate: bool) -> Accepted:
    """Inside a write transaction: cancel the run (UnknownRun, or
    WorkflowRunTerminal for one that has ended); the receipt of its
    ``cancel`` item, the first one's for a run cancelled already."""
    row = tx.fetch_one(_RUN, (run_id,))
    if row is None:
        raise UnknownRun(f"no run {run_id!r}")
    deployment_id = str(row["deployment_id"])
    plain, terminating = cancel_message_ids(run_id)
    first = tx.fetch_one(_FIRST, (deployment_id, plain, terminating, CANCEL_KIND))
    if first is not None:
        return Accepted(
            dispatch_id=str(first["id"]),
            run_id=run_id,
            deployment_id=deployment_id,
            seq=int(first["seq"]),
            duplicate=True,
        )
    if is_terminal(str(row["status"])):
        raise WorkflowRunTerminal(f"run {run_id} is {row['status']}: it cannot be cancelled")
    trigger = Trigger(
        deployment_id=deployment_id,
        run_id=run_id,
        kind=CANCEL_KIND,
        message_id=terminating if terminate else plain,
        subject=reason,
        body=msgspec.json.encode({"reason": reason, "terminate": terminate}),
    )
    (outcome,), _ = accept_triggers(tx, [trigger])
    if isinstance(outcome, HubError):
        raise outcome
    if not isinstance(outcome, Accepted):
        error = error_for(outcome.reason) or AcceptFailed
        raise error(f"cancel of {run_id} not accepted: {outcome.detail}")
    if terminate:
        _end(tx, run_id, reason, time.time())
    return outcome


def _end(tx: Tx, run_id: str, reason: str, now: float) -> None:
    """The run, and its live children (and theirs), ``cancelled`` now, their
    pending timers dropped: the sidecar ends them too once the cancel item
    reaches it."""
    tx.execute(_CANCELLED, (RunStatus.CANCELLED, reason, now, run_id, *_LIVE))
    ended = parents = [run_id]
    while parents:
        children: list[str] = []
        for parent in parents:
            children += [str(r["id"]) for r in tx.fetch_all(_LIVE_CHILDREN, (parent, *_LIVE))]
        for child in children:
            tx.execute(_CANCELLED, (RunStatus.CANCELLED, PARENT_ENDED, now, child, *_LIVE))
        ended = ended + children
        parents = children
    drop_run_timers(tx, ended)
