"""Parked dispatches: listed, counted, and retried.

A dispatch is ``parked`` when its handler failed past the retry budget of
a deployment whose policy is ``park`` (the sidecar consumed it, the run
went on). Its body stays (blob collection counts it as open) and the
dispatcher never sends it again by itself. A retry gives the same row the
deployment's next seq, allocated as the accept allocates seqs, stamps it
with the active version (a retry usually follows a fix) and makes it
``reserved`` again: the dispatcher delivers it (same id, new seq), and the
sidecar's inbox, which holds that id as parked at a lower seq, takes it as
a retry.
"""

from __future__ import annotations

import msgspec

from runtime import RunStatus, is_terminal

from ..._errors import DispatchNotParked, UnknownDispatch, WorkflowRunTerminal
from ..schema import DispatchStatus
from ..sql import Tx, json_array, sql
from ..views import DISPATCHES_BY_ID, DispatchView, dispatch_view

_PARKED = DispatchStatus.PARKED.value
_DISPATCH = sql(
    "SELECT d.deployment_id, d.status, r.status AS run_status, p.version AS active"
    " FROM workflow_run_dispatch d"
    " LEFT JOIN workflow_run r ON r.id = d.run_id"
    " JOIN deployment p ON p.id = d.deployment_id WHERE d.id = ?"
)
# On PostgreSQL the UPDATE locks the deployment row, as the accept's
# ``FOR UPDATE`` does: the seq taken here is nobody else's.
_TAKE_SEQ = sql("UPDATE deployment SET next_seq = next_seq + 1 WHERE id = ?")
_TAKEN = sql("SELECT next_seq - 1 AS seq FROM deployment WHERE id = ?")
_RETRY = sql(
    "UPDATE workflow_run_dispatch SET seq = ?, status = ?, version = ?, error = NULL,"
    " delivered_at = NULL, processed_at = NULL WHERE id = ? AND status = ?"
)
# The statuses written out, not parameters: SQLite uses a partial index
# only for a WHERE it can see implies the index's.
_SUSPENDED = RunStatus.SUSPENDED.value
_LATEST = f"SELECT id FROM workflow_run_dispatch WHERE status = '{_PARKED}'"
_NEWEST_FIRST = " ORDER BY processed_at DESC, id DESC LIMIT ?"
_LIST = sql(_LATEST + _NEWEST_FIRST)
_LIST_OF = sql(_LATEST + " AND deployment_id = ?" + _NEWEST_FIRST)
_SUSPENDED_COUNTS = sql(
    "SELECT deployment_id, COUNT(*) FROM workflow_run"
    f" WHERE status = '{_SUSPENDED}' GROUP BY deployment_id"
)
_PARKED_COUNTS = sql(
    "SELECT deployment_id, COUNT(*) FROM workflow_run_dispatch"
    f" WHERE status = '{_PARKED}' GROUP BY deployment_id"
)


class RetriedDispatch(msgspec.Struct, kw_only=True, frozen=True):
    deployment_id: str
    seq: int


def retry_dispatch(tx: Tx, dispatch_id: str) -> RetriedDispatch:
    """Inside a write transaction: a parked dispatch (DispatchNotParked for
    any other) reserved again at its deployment's next seq."""
    row = tx.fetch_one(_DISPATCH, (dispatch_id,))
    if row is None:
        raise UnknownDispatch(f"no dispatch {dispatch_id!r}")
    if row["status"] != _PARKED:
        raise DispatchNotParked(f"dispatch {dispatch_id} is {row['status']}, not parked")
    run_status = row["run_status"]
    if run_status is not None and is_terminal(run_status):
        raise WorkflowRunTerminal(f"the run of {dispatch_id} is {run_status}")
    deployment_id = str(row["deployment_id"])
    tx.execute(_TAKE_SEQ, (deployment_id,))
    taken = tx.fetch_one(_TAKEN, (deployment_id,))
    assert taken is not None  # the UPDATE above found the row
    seq = int(taken["seq"])
    # Retried under the active version: a retry usually follows a fix.
    active = int(row["active"])
    tx.execute(_RETRY, (seq, DispatchStatus.RESERVED, active, dispatch_id, _PARKED))
    return RetriedDispatch(deployment_id=deployment_id, seq=seq)


def list_parked(tx: Tx, deployment_id: str | None = None, limit: int = 100) -> list[DispatchView]:
    """The latest ``limit`` parked dispatches (of one deployment), newest first."""
    if deployment_id is None:
        ids = [str(r[0]) for r in tx.fetch_all(_LIST, (limit,))]
    else:
        ids = [str(r[0]) for r in tx.fetch_all(_LIST_OF, (deployment_id, limit))]
    views = {
        v.id: v for v in map(dispatch_view, tx.fetch_all(DISPATCHES_BY_ID, (json_array(ids),)))
    }
    return [views[i] for i in ids if i in views]


def count_failures(tx: Tx) -> dict[str, dict[str, int]]:
    """``{"suspended": {deployment: runs}, "parked": {deployment: dispatches}}``,
    each counted through its partial index (only those rows are read)."""
    suspended = tx.fetch_all(_SUSPENDED_COUNTS)
    parked = tx.fetch_all(_PARKED_COUNTS)
    return {
        "suspended": {str(dep): int(n) for dep, n in suspended},
        "parked": {str(dep): int(n) for dep, n in parked},
    }
