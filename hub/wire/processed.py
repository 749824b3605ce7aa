"""DispatchProcessed events, the bulk of every frame, applied as one batch.

A sidecar reports each item it processed with a DispatchProcessed, so a
frame is mostly a run of them. Applied one at a time they cost six
statements each on the hub's only writer, every one a thread hand-off while
the write lock is held; applied as a batch, a run of them costs a few
statements in all: one read each of the events already recorded, the runs
and the dispatches they name, then writes of many rows a statement
(:mod:`hub.store.bulk`).

The outcome is that of applying them one at a time in frame order (the
rules are in :mod:`hub.wire.events`): every decision is made in memory, in
order, against rows read once and updated as each event is decided, and
each run's row is written once, with the state of the last event that moved
it. Only the single writer changes these rows, inside this transaction, so
what was read stays true until the writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import msgspec

from runtime import (
    DEFAULT_RUN_HISTORY,
    Connection,
    DispatchOutcome,
    DispatchProcessed,
    Event,
    Reason,
    RunStatus,
    encode,
)

from .._errors import UnknownDispatch
from ..store import (
    ApprovalStatus,
    DispatchStatus,
    body_digest,
    fetch_all,
    insert_rows,
    insert_statement,
    run_in,
    update_rows,
    update_statement,
)

_OPEN_DISPATCH = (DispatchStatus.RESERVED.value, DispatchStatus.DELIVERED.value)
_CHUNK = 500  # ids per IN (...): far below SQLite's limit on parameters

DeadLetter = Callable[[Event, str], Awaitable[None]]

# Settling a dispatch: its new status, when, an error, the sidecar's version,
# the digest of its inline body, whether to drop that body, its id.
_SETTLE = update_statement(
    (
        ("s_status", "TEXT"),
        ("s_at", "DOUBLE PRECISION"),
        ("s_error", "TEXT"),
        ("s_version", "BIGINT"),
        ("s_digest", "TEXT"),
        ("s_trim", "BIGINT"),
        ("s_id", "TEXT"),
    ),
    "UPDATE workflow_run_dispatch SET status = v.s_status, processed_at = v.s_at,"
    " last_error = COALESCE(v.s_error, last_error),"
    " version = COALESCE(NULLIF(v.s_version, 0), version),"
    " inline_digest = COALESCE(inline_digest, v.s_digest),"
    " body = CASE WHEN v.s_trim = 1 THEN NULL ELSE body END"
    " FROM v WHERE id = v.s_id AND status IN (?, ?)",
)
_RECORD = insert_statement(
    "run_event", ("id", "run_id", "deployment_id", "kind", "payload", "at"), ignore=True
)


@dataclass
class _Run:
    last_seq: int
    last_step: int
    moved: bool = False  # last_seq/last_step changed
    state: dict[str, Any] | None = None  # set by the last event that moved it
    version: int = 0  # the last non-zero version among those events
    resume: bool = False  # it processed an approval decision


@dataclass
class _Dispatch:
    run_id: str
    seq: int
    status: str
    kind: str
    body: bytes | None
    body_digest: str | None
    created_at: float
    raw_digest: str | None


async def _rows(db: Connection, sql: str, ids: Sequence[str], *params: object) -> list[Any]:
    """``sql`` (with ``{marks}`` for the ids) over ``ids`` in chunks."""
    rows: list[Any] = []
    for at in range(0, len(ids), _CHUNK):
        chunk = ids[at : at + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows += await fetch_all(db, sql.format(marks=marks), [*params, *chunk])
    return rows


class ProcessedBatch:
    """One run of consecutive DispatchProcessed events of a frame."""

    def __init__(
        self,
        db: Connection,
        deployment_id: str,
        now: float,
        dead_letter: DeadLetter,
        *,
        keep: int = DEFAULT_RUN_HISTORY,
    ) -> None:
        self.db = db
        self.deployment_id = deployment_id
        self.now = now
        self.dead_letter = dead_letter
        self.keep = keep
        """The run history's length (``trim_history``'s ``keep``)."""
        self.runs_with_events: set[str] = set()
        """Runs that got new events: their history is trimmed."""
        self.settled_after: list[float] = []
        """Seconds from acceptance of each dispatch this batch settled."""

    async def apply(self, events: Sequence[DispatchProcessed]) -> bool:
        """Record and apply the new ones; True when one freed a claim-checked body."""
        ids = sorted({e.event_id for e in events})
        recorded = {
            row[0]
            for row in await _rows(self.db, "SELECT id FROM run_event WHERE id IN ({marks})", ids)
        }
        runs = {
            row[0]: _Run(row[1], row[2])
            for row in await _rows(
                self.db,
                "SELECT id, last_seq, last_step FROM workflow_run"
                " WHERE deployment_id = ? AND is_anchor = 0 AND id IN ({marks})",
                sorted({e.run_id for e in events}),
                self.deployment_id,
            )
        }
        dispatches = {
            row[0]: _Dispatch(*row[1:])
            for row in await _rows(
                self.db,
                "SELECT id, run_id, seq, status, kind, body, body_digest, created_at, raw_digest"
                " FROM workflow_run_dispatch WHERE id IN ({marks})",
                sorted({e.dispatch_id for e in events}),
            )
        }
        fresh: list[DispatchProcessed] = []
        for event in events:
            if event.run_id not in runs:
                await self.dead_letter(event, "foreign_run")
            elif event.event_id not in recorded:
                recorded.add(event.event_id)
                fresh.append(event)
        # A run's history keeps its ``keep`` latest events: the batch's new
        # events before its run's last ``keep`` are recorded without their
        # payload (and settle without their inline body) rather than written
        # whole and trimmed in the same transaction (trim_history).
        later = Counter(event.run_id for event in fresh)
        new_events: list[tuple[object, ...]] = []
        settled: list[tuple[object, ...]] = []
        released = False
        for event in fresh:
            later[event.run_id] -= 1
            trimmed = later[event.run_id] >= self.keep
            self.runs_with_events.add(event.run_id)
            dispatch = dispatches.get(event.dispatch_id)
            if dispatch is None or dispatch.run_id != event.run_id:
                await self.dead_letter(event, UnknownDispatch.reason)
            else:
                # An event of a dispatch settled before is recorded whole:
                # trim_history takes its payload and the dispatch's body.
                trimmed = trimmed and dispatch.status in _OPEN_DISPATCH
                released |= self._decide(event, runs[event.run_id], dispatch, settled, trimmed)
            new_events.append(
                (
                    event.event_id,
                    event.run_id,
                    self.deployment_id,
                    "DispatchProcessed",
                    None if trimmed else encode(event),
                    event.at or self.now,
                )
            )
        await run_in(self.db, partial(insert_rows, statement=_RECORD, rows=new_events))
        await self._write_runs(runs)
        await run_in(
            self.db,
            partial(update_rows, statement=_SETTLE, rows=settled, params=_OPEN_DISPATCH),
        )
        return released

    def _decide(
        self,
        event: DispatchProcessed,
        run: _Run,
        dispatch: _Dispatch,
        settled: list[tuple[object, ...]],
        trimmed: bool,
    ) -> bool:
        # The hub's own seq for the dispatch is authoritative (a v1-era event
        # may not carry one).
        refused = event.outcome == DispatchOutcome.REFUSED_TERMINAL
        newer = event.step > run.last_step if event.step else dispatch.seq > run.last_seq
        if newer:
            run.last_seq = max(dispatch.seq, run.last_seq)
            run.last_step = event.step
            run.moved = True
            if not refused:
                run.state = event.state
                run.version = event.version or run.version
        if dispatch.kind == "approval":
            run.resume = True
        if dispatch.status not in _OPEN_DISPATCH:
            return False
        # Even an out-of-order event settles its dispatch: the sidecar did
        # process it, and redelivering it would only be refused as duplicate.
        if refused:
            status, error = DispatchStatus.CANCELLED.value, Reason.WORKFLOW_RUN_TERMINAL.value
        else:
            status, error = DispatchStatus.PROCESSED.value, None
        dispatch.status = status
        self.settled_after.append(max(0.0, self.now - float(dispatch.created_at)))
        # Applied, never sent again: an inline body stays while the run's
        # history holds this item (replay reads it; retention.trim_history
        # drops it after), its digest and size for good, for a retry's
        # same-content check (hub.md, "Retention"). The digest goes in a
        # column of its own: body_digest's index is for claim checks, and a
        # random key per processed mail would cost each settle a page.
        inline = dispatch.body_digest is None
        digest = body_digest(bytes(dispatch.body or b"")) if inline else None
        settled.append(
            (
                status,
                self.now,
                error,
                event.version,
                digest,
                int(trimmed),
                event.dispatch_id,
            )
        )
        # A claim-checked body or a raw message: its blob may go.
        return not inline or dispatch.raw_digest is not None

    async def _write_runs(self, runs: dict[str, _Run]) -> None:
        moved = [(run_id, run) for run_id, run in runs.items() if run.moved]
        await self.db.executemany(
            "UPDATE workflow_run SET last_seq = ?, last_step = ?, updated_at = ? WHERE id = ?",
            [(r.last_seq, r.last_step, self.now, i) for i, r in moved if r.state is None],
        )
        with_state = [(i, r) for i, r in moved if r.state is not None]
        await self.db.executemany(
            "UPDATE workflow_run SET state = ?, last_seq = ?, last_step = ?,"
            " version = COALESCE(NULLIF(?, 0), version), updated_at = ? WHERE id = ?",
            [
                (
                    msgspec.json.encode(r.state).decode(),
                    r.last_seq,
                    r.last_step,
                    r.version,
                    self.now,
                    i,
                )
                for i, r in with_state
            ],
        )
        # pending -> running once it processed something; waiting -> running
        # once no approval of the run is pending. Each applies to one status
        # only, so applying them after every event is as applying them after each.
        await self.db.executemany(
            "UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ? AND status = ?",
            [(RunStatus.RUNNING, self.now, i, RunStatus.PENDING) for i, _ in with_state],
        )
        await self.db.executemany(
            "UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ? AND status = ?"
            " AND NOT EXISTS (SELECT 1 FROM approval WHERE run_id = ? AND status = ?)",
            [
                (RunStatus.RUNNING, self.now, i, RunStatus.WAITING, i, ApprovalStatus.PENDING)
                for i, r in runs.items()
                if r.resume
            ],
        )
