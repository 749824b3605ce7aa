"""Read model of approvals: what a run asked for, and what was decided.

An approval row is written when the hub ingests the run's ApprovalRequested
event and marked decided by the one accept function, in the transaction
that stores the decision's dispatch. The row has no deployment column: the
deployment is the run's.
"""

from __future__ import annotations

from typing import Any

import msgspec

from runtime import Connection

from .._errors import InvalidRequest, UnknownApproval, UnknownRun
from .queries import resolve_deployment
from .reads import fetch_all
from .schema import ApprovalStatus


class ApprovalView(msgspec.Struct, kw_only=True):
    id: str
    run_id: str
    deployment_id: str
    prompt: str
    status: str  # pending | decided
    decision: str | None  # approve | reject, once decided
    created_at: float
    decided_at: float | None
    # The run's status: a pending approval of a run that ended is never
    # decided (the decision is refused with workflow_run_terminal).
    run_status: str


_APPROVAL = """
SELECT a.id, a.run_id, r.deployment_id, COALESCE(a.prompt, ''), a.status, a.decision,
       a.created_at, a.decided_at, r.status
FROM approval a JOIN workflow_run r ON r.id = a.run_id"""


def _approval(row: Any) -> ApprovalView:
    return ApprovalView(**dict(zip(ApprovalView.__struct_fields__, row, strict=True)))


async def get_approval(db: Connection, approval_id: str) -> ApprovalView:
    rows = await fetch_all(db, f"{_APPROVAL} WHERE a.id = ?", (approval_id,))
    if not rows:
        raise UnknownApproval(f"no approval {approval_id!r}")
    return _approval(rows[0])


async def list_approvals(
    db: Connection,
    *,
    run: str | None = None,
    deployment: str | None = None,
    status: str | None = None,
    limit: int = 100,
) -> list[ApprovalView]:
    """The latest ``limit`` approvals (of one run, of one deployment: id or
    name, in one status), oldest first."""
    where: list[str] = []
    params: list[object] = []
    if status is not None:
        if status not in set(ApprovalStatus):
            choices = ", ".join(ApprovalStatus)
            raise InvalidRequest(f"'status' must be one of {choices}, not {status[:50]!r}")
        where.append("a.status = ?")
        params.append(status)
    if run is not None:
        known = await fetch_all(
            db, "SELECT 1 FROM workflow_run WHERE id = ? AND is_anchor = 0", (run,)
        )
        if not known:
            raise UnknownRun(f"no run {run!r}")
        where.append("a.run_id = ?")
        params.append(run)
    if deployment is not None:
        where.append("r.deployment_id = ?")
        params.append(await resolve_deployment(db, deployment))
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    sql = f"{_APPROVAL} {clause} ORDER BY a.created_at DESC, a.id DESC LIMIT ?"
    return [_approval(row) for row in reversed(await fetch_all(db, sql, (*params, limit)))]
