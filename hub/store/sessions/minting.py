"""Child runs minted for a sidecar (``hub.mint``): one conditional INSERT,
deduplicated by the sidecar's request id.

The child row is inserted by a single ``INSERT ... SELECT`` that matches
only a live parent of the caller's deployment whose anchor is live and
whose deployment is not deleted, so nothing is created for a run or a
deployment that ended meanwhile; the statuses it takes come from the
classifier (``runtime``'s ``is_live``, ``anchor_is_live``), so the SQL
agrees with it. The request id makes a retried mint find the first child.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from runtime import RunStatus, is_live, new_id
from runtime.wire import DeploymentStatus, anchor_is_live

from ..sql import Tx, sql
from .fencing import Fence, check_fence

_LIVE_RUN = tuple(s.value for s in RunStatus if is_live(s))
_LIVE_ANCHOR = tuple(
    sorted({s.value for s in (*DeploymentStatus, *RunStatus) if anchor_is_live(s)})
)

_FIRST = sql(
    "SELECT id FROM workflow_run WHERE parent_run_id = ? AND start_request_id = ?"
    " AND deployment_id = ?"
)
# The IN lists have the classifier's fixed length: declared once, at import.
_INSERT = sql(f"""
INSERT INTO workflow_run (id, deployment_id, parent_run_id, is_anchor, is_top_level, status,
                          start_request_id, created_at, updated_at)
SELECT ?, p.deployment_id, p.id, 0, 0, ?, ?, ?, ?
FROM workflow_run p
JOIN workflow_run a ON a.id = p.deployment_id AND a.is_anchor = 1
JOIN deployment d ON d.id = p.deployment_id AND d.deleted_at IS NULL
WHERE p.id = ? AND p.deployment_id = ? AND p.is_anchor = 0
  AND p.status IN ({", ".join("?" * len(_LIVE_RUN))})
  AND a.status IN ({", ".join("?" * len(_LIVE_ANCHOR))})
""")
_PARENT = sql(
    "SELECT p.status, a.status AS anchor, d.deleted_at FROM workflow_run p"
    " JOIN deployment d ON d.id = p.deployment_id"
    " LEFT JOIN workflow_run a ON a.id = p.deployment_id AND a.is_anchor = 1"
    " WHERE p.id = ? AND p.deployment_id = ? AND p.is_anchor = 0"
)


class MintParent(NamedTuple):
    """A parent that took no child: why is the caller's to say."""

    status: str
    anchor: str | None
    """Its deployment's anchor status (None: no anchor row)."""
    deleted_at: float | None


def mint_child(
    tx: Tx, fence: Fence, parent_run_id: str, request_id: str
) -> str | MintParent | None:
    """Inside a write transaction, fenced: the child run minted for
    ``request_id`` (the first one, for a retry), or the parent as it is when
    it takes no child, or None when there is no such parent."""
    check_fence(tx, fence)
    dep = fence.deployment_id
    first = tx.fetch_one(_FIRST, (parent_run_id, request_id, dep))
    if first is not None:
        return str(first[0])
    run_id, now = new_id("run"), time.time()
    params = (run_id, RunStatus.PENDING, request_id, now, now, parent_run_id, dep)
    if tx.execute(_INSERT, (*params, *_LIVE_RUN, *_LIVE_ANCHOR)) == 1:
        return run_id
    row = tx.fetch_one(_PARENT, (parent_run_id, dep))
    return None if row is None else MintParent(*row)
