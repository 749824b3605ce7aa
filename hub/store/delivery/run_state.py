"""A deployment's runs as the hub applied them, for a sidecar that starts
from the hub's state, and the floor below which it need not wait.

The floor is the highest seq up to which every dispatch of the deployment
is settled (processed, cancelled or parked). A new owner pages through every run in
run id order (``hub.state``): each run with its pending approvals in the
order they were asked for (its gate is rebuilt from them), and the seqs
above the floor that are settled all the same (a waiting run held the ones
before them), so it does not wait for dispatches the hub will never send
again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from ..schema import ApprovalStatus, DispatchStatus
from ..sql import Tx, sql


class AppliedRun(NamedTuple):
    """A run as the hub applied it (``state`` and ``result`` as JSON text)."""

    id: str
    status: str
    state: str | None
    last_seq: int | None
    result: str | None
    error: str | None
    last_step: int | None
    parent_run_id: str | None
    entrypoint: str | None
    version: int | None


class StatePage(NamedTuple):
    """One page of a deployment's applied state."""

    runs: list[AppliedRun]
    """Up to the page's size plus one (which says there are more)."""
    approvals: dict[str, list[str]]
    """Run id -> its pending approvals, for the page's runs."""
    floor_seq: int
    settled: list[int]
    """Seqs above the floor that are settled, in order."""


_FLOOR = sql(
    "SELECT COALESCE((SELECT MIN(seq) FROM workflow_run_dispatch WHERE deployment_id = ?"
    " AND status IN (?, ?)) - 1, (SELECT next_seq - 1 FROM deployment WHERE id = ?), 0)"
)
_RUNS = sql("""
SELECT id, status, state, last_seq, result, error, last_step, parent_run_id, entrypoint,
       version
FROM workflow_run
WHERE deployment_id = ? AND is_anchor = 0 AND id > ?
ORDER BY id LIMIT ?
""")
_APPROVALS = sql(
    "SELECT run_id, id FROM approval WHERE status = ?"
    " AND run_id IN (SELECT value FROM json_each(?)) ORDER BY created_at, id",
    postgres="SELECT run_id, id FROM approval WHERE status = ?"
    " AND run_id IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))"
    " ORDER BY created_at, id",
)
_SETTLED = sql(
    "SELECT seq FROM workflow_run_dispatch WHERE deployment_id = ? AND seq > ?"
    " AND status IN (?, ?, ?) ORDER BY seq LIMIT ?"
)


def floor_seq(tx: Tx, deployment_id: str) -> int:
    """The highest seq up to which every dispatch of the deployment is
    settled: the sidecar need not wait for any of those."""
    params = (deployment_id, DispatchStatus.RESERVED, DispatchStatus.DELIVERED, deployment_id)
    row = tx.fetch_one(_FLOOR, params)
    return max(0, int(row[0])) if row is not None else 0


def read_state_page(
    tx: Tx, deployment_id: str, after_run_id: str, runs: int, settled: int
) -> StatePage:
    """Up to ``runs`` + 1 runs of the deployment past ``after_run_id``, the
    pending approvals of the first ``runs``, the floor, and up to
    ``settled`` seqs settled above it."""
    found = tx.fetch_all(_RUNS, (deployment_id, after_run_id, runs + 1))
    rows = [AppliedRun(*row) for row in found]
    approvals = _pending_approvals(tx, [row.id for row in rows[:runs]])
    floor = floor_seq(tx, deployment_id)
    # A parked dispatch was consumed by the sidecar: settled, for its order.
    settled_statuses = (DispatchStatus.PROCESSED, DispatchStatus.CANCELLED, DispatchStatus.PARKED)
    params = (deployment_id, floor, *settled_statuses, settled)
    seqs = [int(row[0]) for row in tx.fetch_all(_SETTLED, params)]
    return StatePage(rows, approvals, floor, seqs)


def _pending_approvals(tx: Tx, run_ids: Sequence[str]) -> dict[str, list[str]]:
    """The pending approvals of these runs, in the order they were asked for."""
    if not run_ids:
        return {}
    found: dict[str, list[str]] = {}
    ids = msgspec.json.encode(run_ids).decode()
    for run_id, approval_id in tx.fetch_all(_APPROVALS, (ApprovalStatus.PENDING, ids)):
        found.setdefault(run_id, []).append(approval_id)
    return found
