"""Read model of approvals: what a run asked for, and what was decided.

An approval row is written when the hub ingests the run's ApprovalRequested
event and marked decided by the one accept function, in the transaction
that stores the decision's dispatch. The row has no deployment column: the
deployment is the run's.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..._errors import InvalidRequest, UnknownApproval, UnknownRun
from ..schema import ApprovalStatus
from ..sql import Tx, sql
from .queries import resolve_deployment


class ApprovalView(msgspec.Struct, kw_only=True):
    id: str
    run_id: str
    deployment_id: str
    prompt: str
    status: str  # pending | decided
    decision: str | None  # approve | reject (timeout: it expired), once decided
    created_at: float
    decided_at: float | None
    # The run's status: a pending approval of a run that ended is never
    # decided (the decision is refused with workflow_run_terminal).
    run_status: str
    # When it expires undecided (decided ``timeout`` then); None: it waits for ever.
    expires_at: float | None = None


_APPROVAL = """
SELECT a.id, a.run_id, r.deployment_id, COALESCE(a.prompt, ''), a.status, a.decision,
       a.created_at, a.decided_at, r.status, a.expires_at
FROM approval a JOIN workflow_run r ON r.id = a.run_id"""


def _approval(row: Any) -> ApprovalView:
    return ApprovalView(**dict(zip(ApprovalView.__struct_fields__, row, strict=True)))


_BY_ID = sql(f"{_APPROVAL} WHERE a.id = ?")
_KNOWN_RUN = sql("SELECT 1 FROM workflow_run WHERE id = ? AND is_anchor = 0")
# A filter not given is NULL. By run: the approval_by_run index.
_FILTERED = (
    " (CAST(:status AS TEXT) IS NULL OR a.status = :status)"
    " AND (CAST(:deployment AS TEXT) IS NULL OR r.deployment_id = :deployment)"
    " ORDER BY a.created_at DESC, a.id DESC LIMIT :limit"
)
_LATEST = sql(f"{_APPROVAL} WHERE{_FILTERED}")
_LATEST_OF_RUN = sql(f"{_APPROVAL} WHERE a.run_id = :run AND{_FILTERED}")


def get_approval(tx: Tx, approval_id: str) -> ApprovalView:
    row = tx.fetch_one(_BY_ID, (approval_id,))
    if row is None:
        raise UnknownApproval(f"no approval {approval_id!r}")
    return _approval(row)


def list_approvals(
    tx: Tx,
    *,
    run: str | None = None,
    deployment: str | None = None,
    status: str | None = None,
    limit: int = 100,
) -> list[ApprovalView]:
    """The latest ``limit`` approvals (of one run, of one deployment: id or
    name, in one status), oldest first."""
    if status is not None and status not in set(ApprovalStatus):
        choices = ", ".join(ApprovalStatus)
        raise InvalidRequest(f"'status' must be one of {choices}, not {status[:50]!r}")
    params: dict[str, object] = {"status": status, "deployment": None, "limit": limit}
    if run is not None and tx.fetch_one(_KNOWN_RUN, (run,)) is None:
        raise UnknownRun(f"no run {run!r}")
    if deployment is not None:
        params["deployment"] = resolve_deployment(tx, deployment)
    if run is None:
        rows = tx.fetch_all(_LATEST, params)
    else:
        rows = tx.fetch_all(_LATEST_OF_RUN, {**params, "run": run})
    return [_approval(row) for row in reversed(rows)]
