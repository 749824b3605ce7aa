"""The durable inbox: envelopes, run state, run status and the event outbox.

One SQLite file per deployment (``inbox.db``, WAL, ``synchronous=FULL``),
one connection (``runtime.sqlite.Database``). Every operation is a plain
function of the connection (the modules beside this one hold them, and all
of the sidecar's SQL): a read runs on the event loop's thread, a write is
one transaction run whole, on the loop's thread while SQLite's write lock
is free (no other process writes here, so it is), except a batch of frames
of large bodies, stored on a worker thread (:meth:`Inbox.store`). Batched
work (a batch of frames, a batch of processed envelopes) is one
transaction, and the hub's acknowledgements ride on the next one
(``_outbox.py``). The
writer task, the run actors (several at once: the runs of the deployment
are processed concurrently) and the shipper share the inbox; one lock keeps
each write and the processing position it reads before its transaction and
moves after it together, so the actors' commits run one after another, each
whole. A read, or a write that reads nothing of the inbox's own (an
in-flight mark), takes the database's lock alone: what it reads of the
inbox's state it reads inside its body, where no transaction is half done
(a write sets that state in the turn its transaction ends).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from runtime import DispatchOutcome, RunSnapshot, is_terminal
from runtime.errors import TransactionFailed
from runtime.sqlite import Database, Synchronous
from runtime.wire import StepRecorded

from .._errors import InboxConflict
from ._adopt import adopt_hub_state
from ._attempts import RetryRow, charge_crash, clear_in_flight, mark_in_flight, revive_parked
from ._envelope import Envelope, encode_envelope
from ._intake import EnvelopeRow, insert_envelopes, keep_dead_letters, known_dispatches, learn_seqs
from ._meta import keep_version, read_meta, read_version, write_meta
from ._outbox import HeldAcks, Outgoing, drop_acknowledged, set_aside, unacked_events
from ._position import (
    advance_over_done,
    at_rest,
    highest_seq,
    known_through,
    read_position,
    skip_up_to,
)
from ._queue import (
    Pending,
    RunRecord,
    any_held,
    ended_meanwhile,
    next_batch,
    next_rows,
    read_run,
    run_record,
    run_rows,
)
from ._recorded import dispatches_with_steps, read_steps, record_step
from ._schema import migrate
from ._step import Commit, write_step

log = logging.getLogger("mailrun.sidecar.inbox")

DONE_KEPT = 1000
"""Compacted rows kept behind the processing position (for an operator to
look at); older ones are deleted. A late copy of a deleted one is still a
duplicate: every seq at or below the position is done."""

ON_LOOP_BYTES = 64 * 1024
"""A batch of envelopes at most this large is stored on the loop's thread;
a larger one on a worker thread (:meth:`Inbox.store`)."""

BUSY_TIMEOUT = 5.0

ENDED_KEPT = 4096
"""Runs cancelled by a parent's end the inbox remembers, at most; past
that, every commit looks whether its run ended meanwhile (a query each)."""


class Inbox:
    def __init__(
        self,
        db: Database,
        last_seq: int,
        done_kept: int = DONE_KEPT,
        with_steps: set[str] | None = None,
        top: int = 0,
    ) -> None:
        self.db = db
        self.path = db.path
        self._last_seq = last_seq
        self._known = last_seq
        """Every seq up to this one has a row (read at the last search)."""
        self._arrived = True
        """Rows may have come, or the position jumped, since ``_known`` was
        read (delivery, the hub's floor, a takeover)."""
        self._top = top
        """No row has a higher seq (rows above the position go only in a
        takeover, which reads it again). A delivery of the seqs right after
        a known prefix that reaches it extends the prefix without a walk,
        and a commit of every seq up to it moves the position there
        without one: a lone mail's."""
        self._legacy = True
        """Release 1's rows (no seq) may be pending: the search looks for them."""
        self._held = True
        """Rows may be held (a run waits, is suspended, or has let go of them
        and not taken them yet): the search looks for them."""
        self._held_gone = True
        """A commit may have taken the last held row since the search last
        looked whether any is left."""
        self._done_kept = done_kept
        self._acks = HeldAcks(db, done_kept)
        """The hub's acknowledgements, written by the next transaction (a
        store, a step's commit: ``sidecar/storage/_outbox.py``)."""
        # Taken without a turn of the loop when free: the database gives the
        # loop its turns (runtime.sqlite), one hop less per inbox operation.
        self._lock = anyio.Lock(fast_acquire=True)
        self._cancelled: list[str] = []
        self._ended_by_parent: set[str] | None = set()
        """Runs a parent's end cancelled while this inbox was open, whose
        actor may not know it yet: a commit of one of them looks whether
        its run ended meanwhile; no other run's status changes under its
        actor. None: too many to keep, every commit looks."""
        self._with_steps: set[str] = with_steps or set()
        """The dispatches that may have recorded steps: a handler call on any
        other reads none, and a commit of none looks for none."""

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        synchronous: Synchronous = Synchronous.FULL,
        done_kept: int = DONE_KEPT,
    ) -> Inbox:
        """The inbox at ``path``, migrated. ``synchronous``: SQLite's
        durability (``FULL``: a processing commit is on disk before its events
        ship, and a stored batch with it at the latest; a
        benchmark may run ``NORMAL``)."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = await Database.open(path, busy_timeout=BUSY_TIMEOUT, synchronous=synchronous)
        try:
            await migrate(db)
            last_seq = await db.transact(_opened)
            with_steps = await db.read(dispatches_with_steps)
            top = await db.read(highest_seq)
        except BaseException:
            await db.aclose()
            raise
        return cls(db, last_seq, done_kept, with_steps, top)

    async def aclose(self) -> None:
        # Shielded: closing runs during cancellation.
        with anyio.CancelScope(shield=True):
            if self._acks:
                try:
                    await self.write_acked()
                except (sqlite3.Error, TransactionFailed) as exc:
                    # Only a resend of events the hub holds: it acknowledges them again.
                    log.warning("acknowledgements not marked on closing: %s", exc)
            async with self._lock:
                await self.db.aclose()

    @property
    def last_seq(self) -> int:
        """The highest seq processed in order (every lower one is done too)."""
        return self._last_seq

    # --- meta -----------------------------------------------------------------

    async def get_meta(self, key: str) -> Any:
        return await self.db.read(partial(read_meta, key=key))

    async def set_meta(self, key: str, value: Any) -> None:
        async with self._lock:
            await self.db.transact(partial(write_meta, key=key, value=value))

    # --- workflow versions ----------------------------------------------------

    async def get_version(self, version: int) -> tuple[str, bytes] | None:
        """``(digest, sources JSON)`` of a version kept here, or None."""
        return await self.db.read(partial(read_version, version=version))

    async def put_version(self, version: int, digest: str, sources: bytes) -> None:
        kept = partial(keep_version, version=version, digest=digest, sources=sources)
        async with self._lock:
            await self.db.transact(partial(kept, now=time.time()))

    # --- delivery -------------------------------------------------------------

    async def known(self, dispatch_ids: Sequence[str]) -> set[str]:
        """Which of these dispatches are already in the inbox."""
        if not dispatch_ids:
            return set()
        return await self.db.read(partial(known_dispatches, dispatch_ids=dispatch_ids))

    async def store(
        self, envelopes: Sequence[Envelope], dead: Sequence[tuple[str, str, bytes]] = ()
    ) -> list[bool]:
        """Persist a batch, in one transaction; per envelope True (stored) or
        False (a duplicate: already there, earlier in this batch, or at or
        below the processing position, so done here whether or not its row
        is still kept).

        ``dead`` rows ``(source, reason, data)`` go to the dead letter table.
        A duplicate changes nothing, except that a row release 1 stored
        without a seq learns the seq the hub gave it. A frame for a dispatch
        held here as ``parked``, at a higher seq, is the hub's retry of it:
        stored (pending again at its new seq, :func:`revive_parked`).
        """
        now = time.time()
        async with self._lock:
            last = self._last_seq
            behind = [e.seq is not None and e.seq <= last for e in envelopes]
            rows: list[EnvelopeRow] = [
                (e.dispatch_id, encode_envelope(e), e.effective_run_id, e.seq, now)
                for e, done in zip(envelopes, behind, strict=True)
                if not done
            ]
            if not rows and not dead:
                return [False] * len(envelopes)
            marking = self._acks.take(self._last_seq)

            def body(conn: sqlite3.Connection) -> tuple[list[bool], int]:
                inserted = insert_envelopes(conn, rows)
                retries: list[RetryRow] = [
                    (row[0], row[1], row[3], now)
                    for row in rows
                    if row[3] is not None and row[0] not in inserted
                ]
                if retries:
                    inserted |= revive_parked(conn, retries)
                fresh: list[bool] = []
                for e in envelopes:
                    fresh.append(e.dispatch_id in inserted)
                    inserted.discard(e.dispatch_id)  # a second copy in the batch is a duplicate
                learned = [
                    (e.dispatch_id, e.seq)
                    for e, new, done in zip(envelopes, fresh, behind, strict=True)
                    if not new and not done and e.seq is not None
                ]
                moved = advance_over_done(conn, last) if learn_seqs(conn, learned) else last
                if dead:
                    keep_dead_letters(conn, dead, now)
                if marking is not None:
                    marking.write(conn)
                return fresh, moved

            # Not durable: the hub holds every frame durably, and sends
            # again a dispatch it took for delivered that is still not
            # processed after its redelivery bound (hub/wire/delivery/
            # redelivery.py). A crash of any process loses nothing here (the
            # commit is in the file, the OS writes it); a power failure may
            # lose the envelopes stored since the last durable commit, and
            # only those, as they were never processed: a processing commit
            # is durable, and makes every commit before it durable too. So a
            # cycle pays one fsync, its step's (tests/faults/test_lost_store.py).
            # Dead letters are this sidecar's own record: kept durably.
            # A batch of large bodies (megabytes) is written on a worker thread.
            heavy = sum(len(row[1]) for row in rows) > ON_LOOP_BYTES
            fresh, moved = await self._acks.transact(body, marking, durable=bool(dead), heavy=heavy)
            self._extend(envelopes, fresh, moved == last)
            self._last_seq = moved
            self._legacy = self._legacy or any(e.seq is None for e in envelopes)
            await self._acks.marked(marking)
        return fresh

    def _extend(self, envelopes: Sequence[Envelope], fresh: list[bool], still: bool) -> None:
        """What a stored batch tells of the seqs that have a row: the known
        prefix grows by it, without a walk, when it is the seqs right after
        that prefix, all new, and no row lay above them (``still``: the
        position did not move); else the next search walks again."""
        prefix = max(self._known, self._last_seq)
        seqs = [e.seq for e in envelopes if e.seq is not None]
        follows = (
            still
            and not self._arrived
            and self._top <= prefix
            and all(fresh)
            and len(seqs) == len(envelopes)
            and sorted(seqs) == list(range(prefix + 1, prefix + 1 + len(seqs)))
        )
        if follows:
            self._known = self._top = prefix + len(seqs)
            return
        self._arrived = True
        self._top = max(self._top, *seqs) if seqs else self._top

    # --- attempts -------------------------------------------------------------

    async def mark_in_flight(self, dispatch_ids: Sequence[str], run_id: str = "") -> None:
        """Name the dispatches of ``run_id`` whose handler calls are about to
        run, without waiting for the disk; the step's commit clears the mark
        (``sidecar/storage/_attempts.py``)."""
        body = partial(mark_in_flight, dispatch_ids=dispatch_ids, run_id=run_id)
        await self.db.transact(body, durable=False)

    async def charge_crash(self) -> list[str]:
        """Charge the death of an earlier process to the item it was handling
        (:func:`~sidecar.storage._attempts.charge_crash`); the suspects when
        it was handling several."""
        async with self._lock:
            return await self.db.transact(charge_crash)

    async def clear_in_flight(self) -> None:
        """An orderly stop cut the batch short: that was no item's fault."""
        async with self._lock:
            await self.db.transact(clear_in_flight)

    async def raise_floor(self, floor: int) -> int:
        """The hub finished every dispatch up to ``floor``: never wait for them.

        Pending envelopes at or below it are marked ``skipped`` (the hub has
        applied them from another owner). Returns how many were skipped.
        """
        now = time.time()

        def body(conn: sqlite3.Connection) -> tuple[int, int]:
            skipped = skip_up_to(conn, floor, now)
            return skipped, advance_over_done(conn, floor)

        async with self._lock:
            if floor <= self._last_seq:
                return 0
            skipped, self._last_seq = await self.db.transact(body)
            self._arrived = True  # the prefix goes on from the new position
        return skipped

    async def adopt(
        self, runs: Sequence[RunSnapshot], floor: int, settled: Sequence[int] = ()
    ) -> None:
        """Become the owner from the hub's state, in one transaction
        (:func:`~sidecar.storage._adopt.adopt_hub_state`); clears the ``adopt`` mark."""
        adopted = partial(adopt_hub_state, runs=runs, floor=floor, settled=settled, now=time.time())

        def body(conn: sqlite3.Connection) -> tuple[int, int]:
            return adopted(conn), highest_seq(conn)

        async with self._lock:
            self._last_seq, self._top = await self.db.transact(body)
            self._known = self._last_seq
            self._arrived = True
            self._held = self._held_gone = True  # as at the start: look again
            self._acks.reset()  # the outbox replaced, the position maybe moved back
            self._with_steps = await self.db.read(dispatches_with_steps)

    # --- steps ----------------------------------------------------------------

    async def steps_of(self, dispatch_id: str) -> dict[str, StepRecorded]:
        """The steps recorded while ``dispatch_id`` was processed before, by
        name (no query for a dispatch that has none)."""
        if dispatch_id not in self._with_steps:
            return {}
        return await self.db.read(partial(read_steps, dispatch_id=dispatch_id))

    async def record_step(self, step: StepRecorded) -> None:
        """Make ``step`` durable, with its event in the outbox, in one
        transaction of its own (as durable as a commit), before the handler
        goes on (:func:`~sidecar.storage._recorded.record_step`)."""
        async with self._lock:
            await self.db.transact(partial(record_step, step=step))
            self._with_steps.add(step.dispatch_id)

    # --- processing -----------------------------------------------------------

    async def next_batch(self, limit: int, busy: Sequence[str] = ()) -> list[Pending]:
        """The next envelopes of a run that is not ``busy``, in its order
        (:meth:`pick`)."""
        batch, _ = await self.pick(limit, busy)
        return batch

    async def pick(
        self, limit: int, busy: Sequence[str] = (), after: int = 0
    ) -> tuple[list[Pending], int]:
        """The next envelopes of a run that is not ``busy``, in its order
        (:func:`~sidecar.storage._queue.next_rows`); when there are none, the
        seq up to which every pending row is a busy run's (pass it back as
        ``after`` while those runs stay busy: the search starts there).

        First the rows a run held while it waited for an approval, once it
        no longer waits: they come before anything later of that run. Then
        release 1 envelopes (no seq), in arrival order. Then a run's pending
        envelopes within the known prefix: every seq from the position up
        to the last one taken has a row, so a frame not delivered yet (a
        gap) cannot be an earlier item of that run; it never reorders.
        """
        if not self._lock.locked() and self._nothing_after(after):
            return [], max(self._known, self._last_seq)

        def body(conn: sqlite3.Connection) -> tuple[int, list[Any], Any, int]:
            last = self._last_seq
            known = self._known_through(conn, last)
            held = self._look_held(conn)
            found = next_rows(conn, last, known, busy, limit, after, legacy=self._legacy, held=held)
            return known, *found

        self._known, rows, source, scanned = await self.db.read(body)
        if source != "held":  # else the search did not look for them
            self._legacy = source == "legacy"
        return next_batch(rows, source), scanned

    async def run_batch(self, run_id: str, limit: int) -> list[Pending]:
        """The next envelopes of ``run_id``, as :meth:`pick` would take them."""
        if not self._lock.locked() and self._nothing_after(0):
            return []

        def body(conn: sqlite3.Connection) -> tuple[int, list[Any], Any]:
            last = self._last_seq
            known = self._known_through(conn, last)
            held = self._look_held(conn)
            rows = run_rows(conn, run_id, last, known, limit, legacy=self._legacy, held=held)
            return known, *rows

        self._known, rows, source = await self.db.read(body)
        return next_batch(rows, source)

    def nothing_past(self, mark: int) -> bool:
        """Whether a search from ``mark`` (:meth:`pick`'s ``after``) could
        find nothing, known without a query (and no inbox operation under
        way): as :meth:`nothing_to_pick`, with every pending row at or
        below ``mark`` left out."""
        return not self._lock.locked() and self._nothing_after(mark)

    def nothing_to_pick(self) -> bool:
        """Whether no search could find anything now, known without a query
        (and no inbox operation under way): no row came since the known
        prefix was read, the position is at its end (a batch in flight
        holds it back), no row is held and none is release 1's."""
        return not self._lock.locked() and self._nothing_after(0)

    def _nothing_after(self, after: int) -> bool:
        """Whether a search from ``after`` would find nothing, known without
        a query: no row came since the known prefix was read, every pending
        row in it is at or below ``after`` or the position, and no row can
        be held, nor be release 1's. A lone mail's scheduler asks three
        times for each time it finds one (the run taken, then let go)."""
        return (
            not self._arrived
            and not self._held
            and not self._legacy
            and max(after, self._last_seq) >= self._known
        )

    def _look_held(self, conn: sqlite3.Connection) -> bool:
        """Whether the search looks for held rows: once a commit may have
        taken the last of them, whether any is left is asked (once)."""
        if self._held and self._held_gone:
            self._held_gone = False
            self._held = any_held(conn)
        return self._held

    def _known_through(self, conn: sqlite3.Connection, last: int) -> int:
        """The known prefix (:func:`known_through`), read again only when
        rows may have come since: commits change states, never which seqs
        have a row."""
        if not self._arrived:
            return max(self._known, last)
        self._arrived = False
        return known_through(conn, max(self._known, last))

    async def load_run(self, run_id: str) -> RunRecord:
        return run_record(run_id, await self.db.read(partial(read_run, run_id=run_id)))

    def take_cancelled(self) -> list[str]:
        """The runs cancelled since the last call, because a parent ended."""
        cancelled, self._cancelled = self._cancelled, []
        return cancelled

    async def commit(self, c: Commit) -> None:
        """Persist one processing step atomically (:func:`~sidecar.storage._step.write_step`):
        state, consumption, run status, events (outbox) and dead letters.
        Raises :class:`InboxConflict` (and writes nothing) when an envelope
        is no longer pending, or the run ended meanwhile (a parent's end
        cancelled it while its actor processed a batch)."""
        now = time.time()
        async with self._lock:
            last = self._last_seq

            steps = bool(self._with_steps)
            top = self._top
            ended = self._ended_by_parent
            look = c.changes_run and (ended is None or c.run_id in ended)
            marking = self._acks.take(self._last_seq)

            def body(conn: sqlite3.Connection) -> tuple[int, list[str]]:
                if look and ended_meanwhile(conn, c.run_id, c.status):
                    raise InboxConflict(f"run {c.run_id} ended meanwhile")
                written = write_step(conn, c, last_seq=last, now=now, steps=steps, top=top)
                if marking is not None:
                    marking.write(conn)
                return written

            self._last_seq, cancelled = await self._acks.transact(body, marking)
            self._cancelled.extend(cancelled)
            self._note_ended(c, look, cancelled)
            self._held = self._held or bool(c.held)
            self._held_gone = self._held_gone or bool(c.consumed)
            if steps:
                # A parked dispatch keeps its successful steps for its retry.
                self._with_steps.difference_update(
                    d for d, _, outcome in c.consumed if outcome != DispatchOutcome.PARKED
                )
            await self._acks.marked(marking)

    def _note_ended(self, c: Commit, looked: bool, cancelled: list[str]) -> None:
        """Keep the runs ``c`` cancelled, and forget its own run once a
        commit that looked shows its actor knows the run ended."""
        ended = self._ended_by_parent
        if ended is None:
            return
        if looked and is_terminal(c.status):
            ended.discard(c.run_id)
        ended.update(cancelled)
        if len(ended) > ENDED_KEPT:
            self._ended_by_parent = None

    async def at_rest(self) -> bool:
        """Nothing left to process, nothing left for the hub to take (an
        acknowledgement held is written first: no sidecar sleeps with one)."""
        await self.write_acked()
        return await self.db.read(at_rest)

    # --- outbox ---------------------------------------------------------------

    async def unacked(self, limit: int, *, after: int = 0) -> list[tuple[int, Outgoing]]:
        """Events not yet acknowledged by the hub, in outbox order, with
        their positions: those after position ``after`` (0: all)."""
        return await self.db.read(partial(unacked_events, limit=limit, after=after))

    async def mark_acked(self, events: Sequence[Outgoing]) -> None:
        """The hub has applied these events: they leave the outbox, and the
        envelopes they settled drop their bodies (:data:`COMPACTED`), now."""
        self.hold_acked(events)
        await self.write_acked()

    def hold_acked(self, events: Sequence[Outgoing]) -> None:
        """The hub has applied these events: the inbox's next transaction
        marks them (:meth:`write_acked` writes them before)."""
        self._acks.hold(events)

    @property
    def acks_held(self) -> bool:
        """Some acknowledgement waits for a transaction to write it."""
        return bool(self._acks)

    @property
    def acks_taken(self) -> int:
        """How many transactions took the acknowledgements held: one that
        moved since a look took all that was held then."""
        return self._acks.taken

    async def write_acked(self) -> None:
        """Write the acknowledgements held, in a transaction of their own
        unless there are none."""
        if not self._acks:
            return
        async with self._lock:
            await self._acks.write(self._last_seq)

    async def set_aside(self, event_id: str, reason: str) -> None:
        """Move an event that cannot be shipped from the outbox to the dead letters."""
        body = partial(set_aside, event_id=event_id, reason=reason, now=time.time())
        async with self._lock:
            await self.db.transact(body)


def _opened(conn: sqlite3.Connection) -> int:
    # Acknowledged events are the hub's now; keep the outbox small.
    drop_acknowledged(conn)
    return read_position(conn)
