"""The durable inbox: envelopes, run state, run status and the event outbox.

One SQLite file per deployment (``inbox.db``, WAL, ``synchronous=FULL``)
on one aiosqlite connection. Every operation holds one lock: the writer
task, the run actors and the shipper share the connection, and statements
of two tasks must never interleave inside one transaction. Each operation
is a handful of calls at most (each aiosqlite call is a thread hop), and
batched work (a batch of frames, a batch of processed envelopes, one ack)
is one transaction. What a processing step writes is in ``_step.py``, what
a takeover from the hub's state writes in ``_adopt.py``, and the processing
position they move in ``_position.py``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
import msgspec

from runtime import (
    Connection,
    DispatchProcessed,
    EnvelopeQuarantined,
    Event,
    RecordDecodeError,
    RunSnapshot,
    RunStatus,
    configure_sqlite,
    connect_sqlite,
    release_free_pages,
    transact,
)

from ._adopt import adopt_hub_state
from ._envelope import (
    Envelope,
    decode_envelope,
    decode_run_state,
    encode_envelope,
)
from ._position import COMPACTED, advance_over_done
from ._schema import migrate, transaction
from ._step import Commit, write_step

NEXT_PENDING = (
    "SELECT dispatch_id, run_id, seq, envelope FROM inbox"
    " WHERE state = 'pending' AND (seq IS NULL OR seq > ?) ORDER BY seq, rowid LIMIT ?"
)
"""The next pending envelopes: release 1's (no seq: NULL sorts first) in
arrival order, then by seq. The index ``(state, seq)`` holds its rows in
``(seq, rowid)`` order, so this walks it from the first pending row and stops
at the limit, however many wait behind (an order the index cannot give made
SQLite sort every pending row for each batch)."""

DONE_KEPT = 1000
"""Compacted rows kept behind the processing position (for an operator to
look at); older ones are deleted. A late copy of a deleted one is still a
duplicate: every seq at or below the position is done."""

FREE_BYTES_KEPT = 8 * 1024 * 1024
"""Free pages the file keeps for the next envelopes; the rest goes back to
the file system once nothing is pending (while envelopes are, once twice
this is free)."""

GARBAGE_KEPT = 100
"""Frames that do not decode, kept as dead letters per subject (the latest)."""

GARBAGE_BYTES = 64 * 1024
"""What is kept of such a frame: enough to tell what it was."""


@dataclass(frozen=True, slots=True)
class Pending:
    """One pending inbox row; ``envelope`` is None when it cannot be read.

    ``held``: a row its run held while it waited for an approval (behind the
    processing position, so consuming it does not move the position)."""

    dispatch_id: str
    run_id: str
    seq: int | None
    envelope: Envelope | None
    raw: bytes
    error: str = ""
    held: bool = False


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    status: str | None  # None: the run has not started here
    state: dict[str, Any]
    last_seq: int | None
    state_error: str | None = None  # the stored state is unreadable ({} stands in)
    steps: int = 0  # items processed so far
    approvals: list[str] = field(default_factory=list)  # waited for (status waiting)
    parent_run_id: str | None = None  # a child run's parent
    entrypoint: str | None = None  # a child run's handler
    version: int = 0  # the workflow version of its latest item (0: none yet)


class Inbox:
    def __init__(
        self, db: aiosqlite.Connection, path: Path, last_seq: int, done_kept: int = DONE_KEPT
    ) -> None:
        self.db = db
        self.path = path
        self._last_seq = last_seq
        self._done_kept = done_kept
        self._swept = 0
        """Compacted rows at or below this seq are deleted: the next sweep
        starts above it (0: from the start)."""
        self._lock = anyio.Lock()
        self._cancelled: list[str] = []

    @classmethod
    async def open(cls, path: Path, *, done_kept: int = DONE_KEPT) -> Inbox:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = await connect_sqlite(path)
        try:
            await configure_sqlite(db)  # fsynced: stored Acks, events shipped
            await db.execute("PRAGMA busy_timeout=5000")
            await migrate(db)
            # Acknowledged events are the hub's now; keep the outbox small.
            await db.execute("DELETE FROM outbox WHERE acked = 1")
            async with db.execute("SELECT value FROM meta WHERE key = 'last_seq'") as cur:
                row = await cur.fetchone()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await db.close()
            raise
        return cls(db, path, int(row[0]) if row is not None else 0, done_kept)

    async def aclose(self) -> None:
        # Shielded: closing runs during cancellation, and a dropped connection
        # would leave its worker thread behind.
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await self.db.close()

    @property
    def last_seq(self) -> int:
        """The highest seq processed in order (every lower one is done too)."""
        return self._last_seq

    # --- meta -----------------------------------------------------------------

    async def get_meta(self, key: str) -> Any:
        async with self._lock:
            rows = await self.db.execute_fetchall("SELECT value FROM meta WHERE key = ?", (key,))
        return next((row[0] for row in rows), None)

    async def set_meta(self, key: str, value: Any) -> None:
        async with self._lock:
            await self.db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    # --- workflow versions ----------------------------------------------------

    async def get_version(self, version: int) -> tuple[str, bytes] | None:
        """``(digest, sources JSON)`` of a version kept here, or None."""
        async with self._lock:
            rows = await self.db.execute_fetchall(
                "SELECT digest, sources FROM version WHERE version = ?", (version,)
            )
        return next(((str(d), bytes(s)) for d, s in rows), None)

    async def put_version(self, version: int, digest: str, sources: bytes) -> None:
        async with self._lock:
            await self.db.execute(
                "INSERT OR REPLACE INTO version (version, digest, sources, stored_at)"
                " VALUES (?, ?, ?, ?)",
                (version, digest, sources, time.time()),
            )

    # --- delivery -------------------------------------------------------------

    async def known(self, dispatch_ids: Sequence[str]) -> set[str]:
        """Which of these dispatches are already in the inbox."""
        if not dispatch_ids:
            return set()
        marks = ",".join("?" * len(dispatch_ids))
        async with self._lock:
            rows = await self.db.execute_fetchall(
                f"SELECT dispatch_id FROM inbox WHERE dispatch_id IN ({marks})", tuple(dispatch_ids)
            )
        return {row[0] for row in rows}

    async def store(
        self, envelopes: Sequence[Envelope], dead: Sequence[tuple[str, str, bytes]] = ()
    ) -> list[bool]:
        """Persist a batch; per envelope True (stored) or False (a duplicate:
        already there, earlier in this batch, or at or below the processing
        position, so done here whether or not its row is still kept).

        The envelopes go in as ONE multi-row ``INSERT OR IGNORE ... RETURNING``
        statement: atomic on its own, and it names the rows it inserted, so
        duplicates are known without a read first. ``dead`` rows ``(source,
        reason, data)`` go to the dead letter table. A duplicate changes
        nothing, except that a row release 1 stored without a seq learns the
        seq the hub gave it.
        """
        now = time.time()
        fresh: list[bool] = []
        async with self._lock:
            behind = [e.seq is not None and e.seq <= self._last_seq for e in envelopes]
            if not all(behind):
                rows = [
                    (e.dispatch_id, encode_envelope(e), e.effective_run_id, e.seq, now)
                    for e, done in zip(envelopes, behind, strict=True)
                    if not done
                ]
                inserted = {
                    row[0]
                    for row in await self.db.execute_fetchall(
                        "INSERT OR IGNORE INTO inbox (dispatch_id, envelope, state, run_id, seq,"
                        " received_at) VALUES "
                        + ",".join(["(?, ?, 'pending', ?, ?, ?)"] * len(rows))
                        + " RETURNING dispatch_id",
                        [value for row in rows for value in row],
                    )
                }
            else:
                inserted = set()
            for e in envelopes:
                fresh.append(e.dispatch_id in inserted)
                inserted.discard(e.dispatch_id)  # a second copy in the batch is a duplicate
            learned = [
                (e.dispatch_id, e.seq)
                for e, new, done in zip(envelopes, fresh, behind, strict=True)
                if not new and not done and e.seq is not None
            ]
            if learned:
                await self._learn_seqs(learned)
            if dead:
                await self.db.executemany(
                    "INSERT INTO dead_letter (source, reason, data, at) VALUES (?, ?, ?, ?)",
                    [(source, reason, data[:GARBAGE_BYTES], now) for source, reason, data in dead],
                )
                # Whoever can publish here could fill the disk otherwise.
                await self.db.executemany(
                    "DELETE FROM dead_letter WHERE source = ? AND id <= (SELECT id FROM"
                    " dead_letter WHERE source = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
                    [(source, source, GARBAGE_KEPT) for source in {d[0] for d in dead}],
                )
        return fresh

    async def _learn_seqs(self, learned: list[tuple[str, int]]) -> None:
        # One statement for the common case (redelivered rows that have their
        # seq already: it matches nothing); a transaction only when it did.
        updated = await self.db.execute_fetchall(
            "UPDATE inbox SET seq = v.column2 FROM (VALUES "
            + ",".join(["(?, ?)"] * len(learned))
            + ") AS v WHERE inbox.dispatch_id = v.column1 AND inbox.seq IS NULL"
            " RETURNING inbox.dispatch_id",
            [value for pair in learned for value in pair],
        )
        if updated:
            async with transaction(self.db) as db:
                last = await advance_over_done(db, self._last_seq)
            self._last_seq = last

    async def raise_floor(self, floor: int) -> int:
        """The hub finished every dispatch up to ``floor``: never wait for them.

        Pending envelopes at or below it are marked ``skipped`` (the hub has
        applied them from another owner). Returns how many were skipped.
        """
        async with self._lock:
            if floor <= self._last_seq:
                return 0
            async with transaction(self.db) as db:
                cur = await db.execute(
                    "UPDATE inbox SET state = 'done', outcome = 'skipped', processed_at = ?,"
                    " envelope = ? WHERE state = 'pending' AND seq <= ?",
                    (time.time(), COMPACTED, floor),
                )
                last = await advance_over_done(db, floor)
            self._last_seq = last
            return int(cur.rowcount)

    async def adopt(
        self, runs: Sequence[RunSnapshot], floor: int, settled: Sequence[int] = ()
    ) -> None:
        """Become the owner from the hub's state, in one transaction
        (:func:`~sidecar._adopt.adopt_hub_state`); clears the ``adopt`` mark."""
        async with self._lock, transaction(self.db) as db:
            self._last_seq = await adopt_hub_state(db, runs, floor, settled, time.time())
            self._swept = 0  # the position may have moved back: sweep from the start

    # --- processing -----------------------------------------------------------

    async def next_batch(self, limit: int) -> list[Pending]:
        """The next envelopes in processing order, all of one run.

        First the rows a run held while it waited for an approval, once it
        no longer waits: they come before anything later of that run. Then
        release 1 envelopes (no seq), in arrival order. Then the one whose
        seq is ``last_seq + 1`` and its consecutive successors: a gap (a
        frame not delivered yet) stops the batch, it never reorders.
        """
        async with self._lock:
            held = list(
                await self.db.execute_fetchall(
                    "SELECT i.dispatch_id, i.run_id, i.seq, i.envelope FROM inbox AS i"
                    " JOIN run AS r ON r.run_id = i.run_id"
                    " WHERE i.state = 'held' AND r.status != ?"
                    " ORDER BY i.seq, i.rowid LIMIT ?",
                    (RunStatus.WAITING, limit),
                )
            )
            if held:
                run_id = held[0][1]
                return [
                    _pending(d, r, seq, bytes(data), held=True)
                    for d, r, seq, data in held
                    if r == run_id
                ]
            rows = await self.db.execute_fetchall(NEXT_PENDING, (self._last_seq, limit))
        batch: list[Pending] = []
        expected = self._last_seq + 1
        for dispatch_id, run_id, seq, data in rows:
            if batch and (run_id != batch[0].run_id or (seq is None) != (batch[0].seq is None)):
                break
            if seq is not None:
                if seq != expected:
                    break
                expected += 1
            batch.append(_pending(dispatch_id, run_id, seq, bytes(data)))
        return batch

    async def load_run(self, run_id: str) -> RunRecord:
        async with self._lock:
            (row,) = await self.db.execute_fetchall(
                "SELECT r.status, r.last_seq, s.state, r.steps, r.approvals, r.parent_run_id,"
                " r.entrypoint, r.version"
                " FROM (SELECT ? AS id) AS q"
                " LEFT JOIN run AS r ON r.run_id = q.id"
                " LEFT JOIN run_state AS s ON s.run_id = q.id",
                (run_id,),
            )
        status, last_seq, data, steps, approvals, parent, entrypoint, version = row
        state: dict[str, Any] = {}
        error = None
        if data is not None:
            try:
                state = decode_run_state(bytes(data))
            except RecordDecodeError as exc:
                error = str(exc)  # reported by the caller; the bytes stay as they are
        return RunRecord(
            run_id,
            status,
            state,
            last_seq,
            state_error=error,
            steps=int(steps or 0),
            approvals=_approvals.decode(approvals) if approvals else [],
            parent_run_id=parent,
            entrypoint=entrypoint,
            version=int(version or 0),
        )

    def take_cancelled(self) -> list[str]:
        """The runs cancelled since the last call, because a parent ended."""
        cancelled, self._cancelled = self._cancelled, []
        return cancelled

    async def commit(self, c: Commit) -> None:
        """Persist one processing step atomically (:func:`~sidecar._step.write_step`):
        state, consumption, run status, events (outbox) and dead letters.
        Raises :class:`InboxConflict` (and writes nothing) when the envelopes
        are no longer the next ones."""
        async with self._lock:
            last_seq, now = self._last_seq, time.time()

            async def body(db: Connection) -> tuple[int, list[str]]:
                return await write_step(db, c, last_seq, now)

            new_last, cancelled = await transact(self.db, body)
            self._last_seq = new_last
            self._cancelled.extend(cancelled)

    # --- outbox ---------------------------------------------------------------

    async def unacked(self, limit: int, *, after: int = 0) -> list[tuple[int, bytes]]:
        """Encoded events not yet acknowledged by the hub, in outbox order,
        with their positions: those after position ``after`` (0: all)."""
        async with self._lock:
            rows = await self.db.execute_fetchall(
                "SELECT pos, frame FROM outbox WHERE acked = 0 AND pos > ? ORDER BY pos LIMIT ?",
                (after, limit),
            )
        return [(int(row[0]), bytes(row[1])) for row in rows]

    async def mark_acked(self, events: Sequence[Event]) -> None:
        """The hub has applied these events: they leave the outbox, and the
        envelopes they settled drop their bodies (:data:`COMPACTED`)."""
        if not events:
            return
        ids = tuple(e.event_id for e in events)
        marks = ",".join("?" * len(ids))
        # The events that settle a dispatch, the only ones that name one.
        settling = (e for e in events if isinstance(e, DispatchProcessed | EnvelopeQuarantined))
        settled = tuple({e.dispatch_id for e in settling})
        async with self._lock:
            keep_above = self._last_seq - self._done_kept

            async def body(db: Connection) -> bool:
                await db.execute(f"DELETE FROM outbox WHERE event_id IN ({marks})", ids)
                if settled:
                    # Rows already past the kept ones go at once, not compacted first.
                    forget, compact = settled_statements(len(settled))
                    await db.execute(forget, (keep_above, *settled))
                    await db.execute(compact, (COMPACTED, *settled))
                    # Only the rows the position has left behind since the last
                    # sweep: below them, the done rows still waiting for their
                    # events' acks are many under load, and none is compacted.
                    await db.execute(
                        "DELETE FROM inbox WHERE state = 'done' AND seq > ? AND seq <= ?"
                        " AND envelope = ?",
                        (self._swept, keep_above, COMPACTED),
                    )
                ((busy,),) = await db.execute_fetchall(
                    "SELECT EXISTS (SELECT 1 FROM inbox WHERE state = 'pending')"
                )
                return bool(busy)

            # Not durable: these rows only say what the hub already holds. A
            # mark lost to a power failure is a frame sent again, which the
            # hub acknowledges without applying anything; the next durable
            # commit makes this one durable too. Waiting for the disk here
            # held the sidecar's loop that processing and deliveries wait on.
            busy = await transact(self.db, body, durable=False)
            if settled:
                self._swept = max(self._swept, keep_above)
                slack = FREE_BYTES_KEPT if busy else 0
                await release_free_pages(self.db, FREE_BYTES_KEPT, slack=slack)

    async def set_aside(self, event_id: str, reason: str) -> None:
        """Move an event that cannot be shipped from the outbox to the dead letters."""
        async with self._lock, transaction(self.db) as db:
            await db.execute(
                "INSERT INTO dead_letter (source, reason, data, at)"
                " SELECT 'outbox', ?, frame, ? FROM outbox WHERE event_id = ?",
                (reason, time.time(), event_id),
            )
            await db.execute("DELETE FROM outbox WHERE event_id = ?", (event_id,))


def settled_statements(n: int) -> tuple[str, str]:
    """A mark's statements over ``n`` settled dispatch ids: delete those at
    or below a seq, compact the rest. Both find the rows by dispatch id: the
    ``+`` keeps SQLite off the (state, seq) index, whose range would hold
    every done row still waiting for its events' acks."""
    among = f"dispatch_id IN ({','.join('?' * n)})"
    return (
        f"DELETE FROM inbox WHERE +state = 'done' AND +seq <= ? AND {among}",
        f"UPDATE inbox SET envelope = ? WHERE +state = 'done' AND {among}",
    )


_approvals = msgspec.json.Decoder(list[str])


def _pending(
    dispatch_id: str, run_id: str, seq: int | None, data: bytes, *, held: bool = False
) -> Pending:
    try:
        envelope = decode_envelope(data)
    except RecordDecodeError as exc:
        return Pending(dispatch_id, run_id, seq, None, data, str(exc), held=held)
    return Pending(dispatch_id, run_id, seq, envelope, data, held=held)
