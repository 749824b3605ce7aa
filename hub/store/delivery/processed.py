"""The rows a batch of DispatchProcessed events reads and writes, a few
statements for the whole batch.

A sidecar reports each item it processed with a DispatchProcessed, so a
frame is mostly a run of them. Applied as a batch (the decisions are the
wire's: ``hub.wire.processed``), they cost one read each of the events
already recorded, of the runs and of the dispatches they name, and then
writes of many rows a statement: the new events and the settled dispatches
go 32 rows a statement (``hub.store.sql``'s ``GROUP``), the rest in halves
of that (16, 8, 4, 2, 1), each shape declared once. On tables with change
triggers a statement's setup costs about as much as a row
(``hub.store.sql``'s ``insert_statement``, docs/performance-notebook.md,
"Triggers and statements"); with at most six
shapes a statement, they stay in the connection's statement cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

import msgspec

from runtime import RunStatus

from ..schema import ApprovalStatus, DispatchStatus
from ..sql import SIZES, Statement, Tx, groups, sql

OPEN_DISPATCH = (DispatchStatus.RESERVED.value, DispatchStatus.DELIVERED.value)
"""A dispatch not settled yet: what a DispatchProcessed may settle."""

NewRunEvent: TypeAlias = tuple[str, str, str, str, bytes | None, float]
"""A run event to record: id, run id, deployment id, kind, payload (None:
recorded without it), time."""

SettledDispatch: TypeAlias = tuple[str, float, str | None, int, str | None, int, str | None, str]
"""A dispatch settled: its new status, when, a delivery error (None: the one
it has stays), the sidecar's version (0: the one it has stays), the digest
of its inline body (None: none to keep), 1 to drop that body, its handler's
error (a failed or parked one's; None: none), its id."""


class RunPosition(NamedTuple):
    """Where a run's processing stands."""

    last_seq: int
    last_step: int
    pending: bool = True
    """Not started yet: the first event with a state makes it running."""


class DispatchToSettle(NamedTuple):
    """A dispatch as a DispatchProcessed that names it finds it."""

    run_id: str
    seq: int
    status: str
    kind: str
    body: bytes | None
    body_digest: str | None
    created_at: float
    raw_digest: str | None


class ProcessedRows(NamedTuple):
    """What a batch reads before it decides."""

    recorded: set[str]
    """Those of its event ids recorded before."""
    runs: dict[str, RunPosition]
    """Those of its runs that are the deployment's (not its anchor)."""
    dispatches: dict[str, DispatchToSettle]
    """Those of its dispatches that exist, any deployment's."""


class RunMoved(NamedTuple):
    """A run whose processing moved: where to, and its state if an event set it."""

    run_id: str
    last_seq: int
    last_step: int
    state: object
    """The state of the last event that moved it (None: no event set one)."""
    version: int
    """The last non-zero version among those events (0: none)."""
    pending: bool = True
    """Pending when read: only such a run is made running (no statement
    for one that runs already, as a lone mail's run does)."""


# The ids as one JSON array: one statement whatever their number.
_RECORDED = sql(
    "SELECT id FROM run_event WHERE id IN (SELECT value FROM json_each(?))",
    postgres="SELECT id FROM run_event"
    " WHERE id IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)
_RUNS = sql(
    "SELECT id, last_seq, last_step, status FROM workflow_run"
    " WHERE deployment_id = ? AND is_anchor = 0 AND id IN (SELECT value FROM json_each(?))",
    postgres="SELECT id, last_seq, last_step, status FROM workflow_run WHERE deployment_id = ?"
    " AND is_anchor = 0"
    " AND id IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)
_DISPATCHES = sql(
    "SELECT id, run_id, seq, status, kind, body, body_digest, created_at, raw_digest"
    " FROM workflow_run_dispatch WHERE id IN (SELECT value FROM json_each(?))",
    postgres="SELECT id, run_id, seq, status, kind, body, body_digest, created_at, raw_digest"
    " FROM workflow_run_dispatch"
    " WHERE id IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)


def _insert_events(rows: int) -> Statement:
    values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * rows)
    columns = "run_event (id, run_id, deployment_id, kind, payload, at)"
    return sql(
        f"INSERT OR IGNORE INTO {columns} VALUES {values}",
        postgres=f"INSERT INTO {columns} VALUES {values} ON CONFLICT DO NOTHING",
    )


# A sidecar's events can settle a dispatch whose stored Ack never reached this
# hub (a restart between them): it had the dispatch by then at the latest.
_SETTLE_SET = (
    "UPDATE workflow_run_dispatch SET status = v.s_status, processed_at = v.s_at,"
    " delivered_at = COALESCE(delivered_at, v.s_at),"
    " last_error = COALESCE(v.s_error, last_error),"
    " version = COALESCE(NULLIF(v.s_version, 0), version),"
    " inline_digest = COALESCE(inline_digest, v.s_digest),"
    " body = CASE WHEN v.s_trim = 1 THEN NULL ELSE body END,"
    " error = v.s_failure"
)
_SETTLE_COLUMNS = "v(s_status, s_at, s_error, s_version, s_digest, s_trim, s_failure, s_id)"
_SETTLE_WHERE = "WHERE id = v.s_id AND status IN (?, ?)"
# PostgreSQL types a VALUES list's parameters as text unless told.
_SETTLE_PG_ROW = (
    "(CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION), CAST(? AS TEXT), CAST(? AS BIGINT),"
    " CAST(? AS TEXT), CAST(? AS INTEGER), CAST(? AS TEXT), CAST(? AS TEXT))"
)


def _settle(rows: int) -> Statement:
    """Each row of ``v`` matches one dispatch (by id), still open."""
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * rows)
    pg_values = ", ".join([_SETTLE_PG_ROW] * rows)
    return sql(
        f"WITH {_SETTLE_COLUMNS} AS (VALUES {values}) {_SETTLE_SET} FROM v {_SETTLE_WHERE}",
        postgres=f"{_SETTLE_SET} FROM (VALUES {pg_values}) AS {_SETTLE_COLUMNS} {_SETTLE_WHERE}",
    )


_INSERT_EVENTS = {rows: _insert_events(rows) for rows in SIZES}
_SETTLE = {rows: _settle(rows) for rows in SIZES}

_MOVED = sql("UPDATE workflow_run SET last_seq = ?, last_step = ?, updated_at = ? WHERE id = ?")
_MOVED_WITH_STATE = sql(
    "UPDATE workflow_run SET state = ?, last_seq = ?, last_step = ?,"
    " version = COALESCE(NULLIF(?, 0), version), updated_at = ? WHERE id = ?"
)
_STARTED = sql("UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ? AND status = ?")
_RESUMED = sql(
    "UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ? AND status = ?"
    " AND NOT EXISTS (SELECT 1 FROM approval WHERE run_id = ? AND status = ?)"
)


def _ids(ids: Sequence[str]) -> str:
    return msgspec.json.encode(ids).decode()


def read_processed(
    tx: Tx,
    deployment_id: str,
    event_ids: Sequence[str],
    run_ids: Sequence[str],
    dispatch_ids: Sequence[str],
) -> ProcessedRows:
    """What a batch of DispatchProcessed events of ``deployment_id`` finds:
    the events recorded already, the runs and the dispatches they name."""
    recorded = {row[0] for row in tx.fetch_all(_RECORDED, (_ids(event_ids),))}
    runs = {
        row[0]: RunPosition(row[1], row[2], row[3] == RunStatus.PENDING)
        for row in tx.fetch_all(_RUNS, (deployment_id, _ids(run_ids)))
    }
    dispatches = {
        row[0]: DispatchToSettle(row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8])
        for row in tx.fetch_all(_DISPATCHES, (_ids(dispatch_ids),))
    }
    return ProcessedRows(recorded, runs, dispatches)


def write_processed(
    tx: Tx,
    now: float,
    events: Sequence[NewRunEvent],
    moved: Sequence[RunMoved],
    resumed: Sequence[str],
    settled: Sequence[SettledDispatch],
) -> None:
    """Inside the batch's write transaction: record ``events`` (those
    recorded meanwhile are left alone), move each of ``moved`` (a run with a
    state also goes from pending to running, if it was pending when read),
    make each of ``resumed`` running again if it is waiting and no approval
    of it is pending, settle each of ``settled`` that is still open."""
    for group in groups(events):
        tx.execute(_INSERT_EVENTS[len(group)], [v for row in group for v in row])
    tx.execute_many(
        _MOVED, [(r.last_seq, r.last_step, now, r.run_id) for r in moved if r.state is None]
    )
    with_state = [r for r in moved if r.state is not None]
    tx.execute_many(
        _MOVED_WITH_STATE,
        [
            (
                msgspec.json.encode(r.state).decode(),
                r.last_seq,
                r.last_step,
                r.version,
                now,
                r.run_id,
            )
            for r in with_state
        ],
    )
    # pending -> running once it processed something; waiting -> running
    # once no approval of the run is pending. Each applies to one status
    # only, so applying them after every event is as applying them after each.
    tx.execute_many(
        _STARTED,
        [(RunStatus.RUNNING, now, r.run_id, RunStatus.PENDING) for r in with_state if r.pending],
    )
    tx.execute_many(
        _RESUMED,
        [
            (RunStatus.RUNNING, now, run_id, RunStatus.WAITING, run_id, ApprovalStatus.PENDING)
            for run_id in resumed
        ],
    )
    for group in groups(settled):
        tx.execute(_SETTLE[len(group)], [*(v for row in group for v in row), *OPEN_DISPATCH])
