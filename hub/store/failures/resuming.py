"""Suspended runs resumed: by the operator (``POST /runs/{id}/resume``), or
all of a deployment's at once when a new version becomes active.

A resume is one transaction: a ``resume`` item minted for the run through
the one accept function (it takes the run's next seq and is delivered like
any item; the sidecar takes it ahead of what the run holds, as it takes an
approval decision), the run's open dispatches re-stamped with the active
version, and the run ``running`` again, its suspension's fields cleared.
"""

from __future__ import annotations

import time

from runtime import RESUME_KIND, RunStatus

from ..._errors import AcceptFailed, HubError, RunNotSuspended, UnknownRun, error_for
from ..accepting import Accepted, Trigger, accept_triggers
from ..schema import DispatchStatus
from ..sql import Tx, sql

_RUN = sql(
    "SELECT r.deployment_id, r.status, d.version FROM workflow_run r"
    " JOIN deployment d ON d.id = r.deployment_id WHERE r.id = ? AND r.is_anchor = 0"
)
# The statuses compared are written out: bound, SQLite would compile these
# statements again at every run (the run table's partial index on a status).
_IS_SUSPENDED = f"status = '{RunStatus.SUSPENDED}'"
_SUSPENDED = sql(
    f"SELECT id FROM workflow_run WHERE deployment_id = ? AND {_IS_SUSPENDED} ORDER BY id"
)
_RESTAMP = sql("UPDATE workflow_run_dispatch SET version = ? WHERE run_id = ? AND status IN (?, ?)")
_RUNNING = sql(
    "UPDATE workflow_run SET status = ?, suspended_at = NULL, failing_dispatch_id = NULL,"
    " error = NULL, updated_at = ? WHERE id = ? AND status = ?"
)
_ACTIVE = sql("SELECT version FROM deployment WHERE id = ?")
_FAILED_ON = sql(
    "SELECT COALESCE(f.version, 1) AS failed_on, d.version AS active"
    " FROM workflow_run r JOIN deployment d ON d.id = r.deployment_id"
    " JOIN workflow_run_dispatch f ON f.id = r.failing_dispatch_id"
    f" WHERE r.id = ? AND r.{_IS_SUSPENDED}"
)


def resume_run(tx: Tx, run_id: str) -> str:
    """Inside a write transaction: resume a suspended run (RunNotSuspended
    for any other); the id of the resume dispatch."""
    row = tx.fetch_one(_RUN, (run_id,))
    if row is None:
        raise UnknownRun(f"no run {run_id!r}")
    if row["status"] != RunStatus.SUSPENDED:
        raise RunNotSuspended(f"run {run_id} is {row['status']}, not suspended")
    return _resume(tx, run_id, str(row["deployment_id"]), int(row["version"]))


def resume_suspended(tx: Tx, deployment_id: str) -> list[str]:
    """Inside a write transaction: resume every suspended run of the
    deployment (its active version has just changed); their ids."""
    row = tx.fetch_one(_ACTIVE, (deployment_id,))
    if row is None:
        return []
    runs = [str(r["id"]) for r in tx.fetch_all(_SUSPENDED, (deployment_id,))]
    for run_id in runs:
        _resume(tx, run_id, deployment_id, int(row["version"]))
    return runs


def resume_if_outdated(tx: Tx, run_id: str) -> str | None:
    """Inside a write transaction, just after a run was suspended: resume it
    at once when its failing item was stamped with a version that is no
    longer the active one (the suspension crossed an activation, which
    resumed the suspended runs before this one was); the resume dispatch's
    id, or None. An item that fails under the active version stays suspended."""
    row = tx.fetch_one(_FAILED_ON, (run_id,))
    if row is None or int(row["failed_on"]) == int(row["active"]):
        return None
    deployment = tx.fetch_one(_RUN, (run_id,))
    assert deployment is not None  # the run was just read
    return _resume(tx, run_id, str(deployment["deployment_id"]), int(row["active"]))


def _resume(tx: Tx, run_id: str, deployment_id: str, version: int) -> str:
    trigger = Trigger(deployment_id=deployment_id, run_id=run_id, kind=RESUME_KIND)
    (outcome,), _ = accept_triggers(tx, [trigger])
    if isinstance(outcome, HubError):
        raise outcome
    if not isinstance(outcome, Accepted):
        error = error_for(outcome.reason) or AcceptFailed
        raise error(f"resume of {run_id} not accepted: {outcome.detail}")
    params = (version, run_id, DispatchStatus.RESERVED, DispatchStatus.DELIVERED)
    tx.execute(_RESTAMP, params)
    tx.execute(_RUNNING, (RunStatus.RUNNING, time.time(), run_id, RunStatus.SUSPENDED))
    return outcome.dispatch_id
