"""Child run minting (``hub.mint``): one conditional INSERT, deduped by request.

The child row is inserted by a single ``INSERT ... SELECT`` that matches only
a live, non-terminal parent of the caller's deployment whose anchor is live,
so nothing is created for a run or deployment that ended meanwhile. The
sidecar's ``request_id`` makes a retried mint return the first child.
"""

from __future__ import annotations

import time

from runtime import (
    Connection,
    DeploymentStatus,
    FrameDecoder,
    MintChild,
    Minted,
    Reason,
    Refused,
    RunStatus,
    afailpoint,
    anchor_is_live,
    is_live,
    is_terminal,
    new_id,
)

from ..store import Store, fetch_one
from .sessions import SessionTable

# Derived from the classifier, so the SQL condition agrees with it.
_LIVE_RUN = tuple(s.value for s in RunStatus if is_live(s))
_LIVE_ANCHOR = tuple(
    sorted({s.value for s in (*DeploymentStatus, *RunStatus) if anchor_is_live(s)})
)

_INSERT = f"""
INSERT INTO workflow_run (id, deployment_id, parent_run_id, is_anchor, is_top_level, status,
                          start_request_id, created_at, updated_at)
SELECT ?, p.deployment_id, p.id, 0, 0, ?, ?, ?, ?
FROM workflow_run p
JOIN workflow_run a ON a.id = p.deployment_id AND a.is_anchor = 1
JOIN deployment d ON d.id = p.deployment_id AND d.deleted_at IS NULL
WHERE p.id = ? AND p.deployment_id = ? AND p.is_anchor = 0
  AND p.status IN ({",".join("?" * len(_LIVE_RUN))})
  AND a.status IN ({",".join("?" * len(_LIVE_ANCHOR))})
"""


class MintHandler:
    """Answers ``hub.mint`` with Minted or Refused."""

    def __init__(self, *, store: Store, sessions: SessionTable) -> None:
        self._store = store
        self._sessions = sessions
        self._decoder: FrameDecoder[MintChild] = FrameDecoder(MintChild)

    async def __call__(self, data: bytes, sender: str | None) -> Minted | Refused:
        req = self._decoder.decode(data)
        session = self._sessions.check(
            req.session_id, req.deployment_id, req.owner_epoch, sender=sender
        )
        dep = session.deployment_id
        if not req.request_id:
            return Refused(reason=Reason.INVALID_REQUEST, detail="request_id is required")
        # Admitted, not created: the parent may end or its deployment be
        # deleted here; the fence and the conditional INSERT see to that.
        await afailpoint("hub.mint.before_claim")

        async def body(db: Connection) -> Minted | Refused:
            await self._sessions.fence(db, dep, req.owner_epoch)
            first = await fetch_one(
                db,
                "SELECT id FROM workflow_run WHERE parent_run_id = ? AND start_request_id = ?"
                " AND deployment_id = ?",
                (req.parent_run_id, req.request_id, dep),
            )
            if first is not None:
                return Minted(run_id=first["id"])
            run_id, now = new_id("run"), time.time()
            cur = await db.execute(
                _INSERT,
                (
                    run_id,
                    RunStatus.PENDING,
                    req.request_id,
                    now,
                    now,
                    req.parent_run_id,
                    dep,
                    *_LIVE_RUN,
                    *_LIVE_ANCHOR,
                ),
            )
            if cur.rowcount == 1:
                return Minted(run_id=run_id)
            return await _why_not(db, req.parent_run_id, dep)

        return await self._store.transact(body)


async def _why_not(db: Connection, parent_run_id: str, deployment_id: str) -> Refused:
    """Name the reason the conditional insert matched nothing."""
    row = await fetch_one(
        db,
        "SELECT p.status, a.status AS anchor, d.deleted_at FROM workflow_run p"
        " JOIN deployment d ON d.id = p.deployment_id"
        " LEFT JOIN workflow_run a ON a.id = p.deployment_id AND a.is_anchor = 1"
        " WHERE p.id = ? AND p.deployment_id = ? AND p.is_anchor = 0",
        (parent_run_id, deployment_id),
    )
    if row is None:
        return Refused(reason=Reason.UNKNOWN_RUN, detail=parent_run_id)
    if row["deleted_at"] is not None or not anchor_is_live(row["anchor"] or ""):
        return Refused(reason=Reason.DEPLOYMENT_NOT_LIVE, detail=deployment_id)
    if is_terminal(row["status"]):
        return Refused(reason=Reason.WORKFLOW_RUN_TERMINAL, detail=parent_run_id)
    return Refused(reason=Reason.PARENT_NOT_LIVE, detail=f"{parent_run_id} is {row['status']}")
