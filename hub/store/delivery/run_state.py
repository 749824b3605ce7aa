"""A deployment's runs as the hub applied them, for a sidecar that starts
from the hub's state, and the floor below which it need not wait.

The floor is the highest seq up to which every dispatch of the deployment
is settled (processed, cancelled or parked). A new owner pages through every run in
run id order (``hub.state``): each run with its pending approvals in the
order they were asked for (its gate is rebuilt from them), and the seqs
above the floor that are settled all the same (a waiting or suspended run
held the ones before them), so it does not wait for dispatches the hub will
never send again. Settled there means not open: processed, cancelled,
parked, or left behind by a parked dispatch retried at a new seq (the only
gap a deployment's seqs ever have).

Each run also comes with the recorded steps of its open dispatches
(:mod:`~hub.store.delivery.run_steps`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from runtime.wire import StepRecorded

from ..schema import ApprovalStatus, DispatchStatus
from ..sql import Tx, sql
from .run_steps import open_steps


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
    steps: dict[str, list[StepRecorded]]
    """Run id -> the steps of its unsettled dispatches, for the page's runs,
    in the order they were recorded."""


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
_OPEN_ABOVE = sql(
    "SELECT seq FROM workflow_run_dispatch WHERE deployment_id = ? AND seq > ?"
    " AND status IN (?, ?) ORDER BY seq LIMIT ?"
)
_NEXT_SEQ = sql("SELECT next_seq FROM deployment WHERE id = ?")
_OPEN_CHUNK = 1000


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
    page_ids = [row.id for row in rows[:runs]]
    approvals = _pending_approvals(tx, page_ids)
    floor = floor_seq(tx, deployment_id)
    above = _settled_above(tx, deployment_id, floor, settled)
    return StatePage(rows, approvals, floor, above, open_steps(tx, page_ids))


def _settled_above(tx: Tx, deployment_id: str, floor: int, limit: int) -> list[int]:
    """Up to ``limit`` seqs above ``floor`` that are not open, in order: the
    seqs between the open ones (and after the last, up to the last taken),
    the open ones read a chunk at a time."""
    row = tx.fetch_one(_NEXT_SEQ, (deployment_id,))
    end = int(row[0]) if row is not None else floor + 1
    found: list[int] = []
    seq = floor + 1
    while len(found) < limit and seq < end:
        params = (deployment_id, seq - 1, DispatchStatus.RESERVED, DispatchStatus.DELIVERED,
                  _OPEN_CHUNK)  # fmt: skip
        bounds = [int(r[0]) for r in tx.fetch_all(_OPEN_ABOVE, params)]
        if len(bounds) < _OPEN_CHUNK:
            bounds.append(end)  # every open one is read: the rest up to ``end`` is settled
        for bound in bounds:
            found.extend(range(seq, min(bound, seq + limit - len(found))))
            seq = bound + 1
    return found


def _pending_approvals(tx: Tx, run_ids: Sequence[str]) -> dict[str, list[str]]:
    """The pending approvals of these runs, in the order they were asked for."""
    if not run_ids:
        return {}
    found: dict[str, list[str]] = {}
    ids = msgspec.json.encode(run_ids).decode()
    for run_id, approval_id in tx.fetch_all(_APPROVALS, (ApprovalStatus.PENDING, ids)):
        found.setdefault(run_id, []).append(approval_id)
    return found
