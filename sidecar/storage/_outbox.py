"""The event outbox: events encoded once as a step makes them, committed
with it, read in order by the shipper, and gone once the hub has
acknowledged them.

An event is encoded (msgpack, the wire's form) when it is made; its size is
checked on those bytes, the outbox stores them, and the shipper puts them
in a RunEvents frame as they are (``msgspec.Raw``). A DispatchProcessed
carries the run's state, which a step has encoded already (as the inbox's
``run_state`` keeps it): :func:`processed` writes those bytes in as they
are, so a state is encoded once per item whatever reads it after.

An acknowledgement is also where retention happens: the envelopes the
acknowledged events settled drop their bodies (:data:`COMPACTED`), and the
done rows the processing position has left far enough behind are deleted.

An acknowledgement says the hub holds the events: their rows leave the
outbox, and the envelopes they settle drop their bodies. Nothing waits on
that mark and nobody is told of it; a mark lost to a crash is a frame sent
again, which the hub acknowledges without applying anything (it ingests by
event id). So it need not be a transaction of its own: it is held
(:class:`HeldAcks`), and the inbox's next transaction (a batch of frames stored, a step's commit)
writes it with its own rows. Under steady mail that is within
milliseconds: a cycle is one transaction shorter. The shipper writes what
no transaction took within half a second (``sidecar/link/_shipper.py``),
the inbox writes it before it says it is at rest, so a sidecar never
sleeps with a mark unwritten, and when it closes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple, TypeVar

import msgspec

from runtime import DispatchProcessed, EnvelopeQuarantined, Event, encode
from runtime.sqlite import Body, Database, free_pages_over, release_free_pages

from ._position import COMPACTED


class Outgoing(NamedTuple):
    """One event as the outbox keeps it."""

    event_id: str
    run_id: str
    kind: str  # the event's type (its tag)
    frame: bytes  # the event, encoded


def outgoing(event: Event) -> Outgoing:
    return Outgoing(event.event_id, event.run_id, type(event).__name__, encode(event))


class _Processed(msgspec.Struct, tag="DispatchProcessed", tag_field="t", kw_only=True):
    """``runtime.DispatchProcessed`` as it is encoded, its state already
    encoded: the same fields in the same order (tests/sidecar/storage/test_events.py
    holds the two to the same bytes)."""

    event_id: str
    run_id: str
    at: float
    dispatch_id: str
    seq: int | None
    state: msgspec.Raw
    outcome: str
    step: int
    version: int
    error: str
    trace: dict[str, str]


def processed(
    *,
    event_id: str,
    run_id: str,
    at: float,
    dispatch_id: str,
    seq: int | None,
    state: bytes,
    outcome: str,
    step: int,
    version: int,
    error: str = "",
    trace: dict[str, str] | None = None,
) -> Outgoing:
    """A DispatchProcessed whose ``state`` is the run's state encoded (a
    msgpack map, as the inbox keeps it); ``error``: why a ``failed`` or
    ``parked`` one was not processed; ``trace``: the handler call's context."""
    event = _Processed(
        event_id=event_id,
        run_id=run_id,
        at=at,
        dispatch_id=dispatch_id,
        seq=seq,
        state=msgspec.Raw(state),
        outcome=outcome,
        step=step,
        version=version,
        error=error,
        trace=trace or {},
    )
    return Outgoing(event_id, run_id, DispatchProcessed.__name__, encode(event))


SETTLING = frozenset({DispatchProcessed.__name__, EnvelopeQuarantined.__name__})
"""The kinds of event that settle a dispatch, the only ones that name one."""


class _Settles(msgspec.Struct):
    dispatch_id: str
    seq: int | None = None  # an EnvelopeQuarantined names none


_settles = msgspec.msgpack.Decoder(_Settles)


def settled_dispatch(event: Outgoing) -> str | None:
    """The dispatch ``event`` settles (None: it settles none)."""
    settles = _settled(event)
    return None if settles is None else settles.dispatch_id


def _settled(event: Outgoing) -> _Settles | None:
    """The dispatch ``event`` settles and the seq it was processed at. Read
    alone: a decoder skips the rest of the event (the state) without
    building it."""
    if event.kind not in SETTLING:
        return None
    return _settles.decode(event.frame)


def add_events(conn: sqlite3.Connection, events: Iterable[Outgoing]) -> None:
    """Append ``events`` to the outbox, in order."""
    conn.executemany(
        "INSERT INTO outbox (event_id, run_id, kind, frame) VALUES (?, ?, ?, ?)", events
    )


def unacked_events(conn: sqlite3.Connection, limit: int, after: int) -> list[tuple[int, Outgoing]]:
    """Events the hub has not acknowledged, after outbox position ``after``,
    in order, with their positions."""
    rows = conn.execute(
        "SELECT pos, event_id, run_id, kind, frame FROM outbox"
        " WHERE acked = 0 AND pos > ? ORDER BY pos LIMIT ?",
        (after, limit),
    )
    return [(int(pos), Outgoing(e, r, k, bytes(f))) for pos, e, r, k, f in rows]


def drop_acknowledged(conn: sqlite3.Connection) -> None:
    """Rows an older release kept once acknowledged (``acked = 1``)."""
    conn.execute("DELETE FROM outbox WHERE acked = 1")


def has_acknowledged(conn: sqlite3.Connection) -> bool:
    """Whether an older release left acknowledged rows (this one never marks
    a row acknowledged: it deletes it)."""
    return conn.execute("SELECT 1 FROM outbox WHERE acked = 1 LIMIT 1").fetchone() is not None


def forget_acknowledged(
    conn: sqlite3.Connection,
    event_ids: Sequence[str],
    settled: Sequence[str],
    *,
    keep_above: int,
    swept: int,
    sweep: bool = True,
    past: bool = True,
) -> None:
    """The hub applied ``event_ids``: they leave the outbox; the dispatches
    they ``settled`` lose their bodies, or their rows when they are at or
    below ``keep_above`` (``past``: some may be); with ``sweep``, compacted
    rows above ``swept`` (the last sweep) and at or below ``keep_above`` go."""
    marks = ",".join("?" * len(event_ids))
    conn.execute(f"DELETE FROM outbox WHERE event_id IN ({marks})", tuple(event_ids))
    if settled:
        # Rows already past the kept ones go at once, not compacted first.
        forget, compact = settled_statements(len(settled))
        if past:
            conn.execute(forget, (keep_above, *settled))
        conn.execute(compact, (COMPACTED, *settled))
    if settled and sweep:
        # Only the rows the position has left behind since the last sweep:
        # below them, the done rows still waiting for their events' acks are
        # many under load, and none is compacted.
        conn.execute(
            "DELETE FROM inbox WHERE state = 'done' AND seq > ? AND seq <= ? AND envelope = ?",
            (swept, keep_above, COMPACTED),
        )


def any_pending(conn: sqlite3.Connection) -> bool:
    """Whether any envelope waits to be processed."""
    (busy,) = conn.execute("SELECT EXISTS (SELECT 1 FROM inbox WHERE state = 'pending')").fetchone()
    return bool(busy)


def settled_statements(n: int) -> tuple[str, str]:
    """An acknowledgement's statements over ``n`` settled dispatch ids: delete
    those at or below a seq, compact the rest. Both find the rows by dispatch
    id: the ``+`` keeps SQLite off the (state, seq) index, whose range would
    hold every done row still waiting for its events' acks."""
    among = f"dispatch_id IN ({','.join('?' * n)})"
    return (
        f"DELETE FROM inbox WHERE +state = 'done' AND +seq <= ? AND {among}",
        f"UPDATE inbox SET envelope = ? WHERE +state = 'done' AND {among}",
    )


def set_aside(conn: sqlite3.Connection, event_id: str, reason: str, now: float) -> None:
    """Move an event that cannot be shipped from the outbox to the dead letters."""
    conn.execute(
        "INSERT INTO dead_letter (source, reason, data, at)"
        " SELECT 'outbox', ?, frame, ? FROM outbox WHERE event_id = ?",
        (reason, now, event_id),
    )
    conn.execute("DELETE FROM outbox WHERE event_id = ?", (event_id,))


T = TypeVar("T")

FREE_BYTES_KEPT = 8 * 1024 * 1024
"""Free pages the file keeps for the next envelopes; the rest goes back to
the file system once nothing is pending (while envelopes are, once twice
this is free)."""


@dataclass(slots=True)
class Marking:
    """Acknowledged events taken for one transaction, and what it found."""

    events: list[Outgoing]
    keep_above: int
    """Done rows at or below this seq are deleted, not compacted."""
    swept: int
    """Compacted rows at or below this seq were deleted by an earlier mark."""
    settled: list[str]
    past: bool = True
    """Some settled row may be at or below ``keep_above``: its row goes."""
    sweep: bool = True
    """Delete the compacted rows between ``swept`` and ``keep_above``: once
    enough have gathered (:meth:`HeldAcks.take`)."""
    release: bool = False
    """Free pages are worth giving back to the file system."""
    busy: bool = False
    """Envelopes were pending when the release was asked for."""

    def write(self, conn: sqlite3.Connection) -> None:
        """The mark, inside the caller's transaction."""
        forget_acknowledged(
            conn,
            event_ids=[e.event_id for e in self.events],
            settled=self.settled,
            keep_above=self.keep_above,
            swept=self.swept,
            sweep=self.sweep,
            past=self.past,
        )
        # Whether a release has work, asked here: the worker thread it runs
        # on is a hand-off and back, which a lone mail need not pay when
        # there is nothing to give back. The least it could release for
        # first (one pragma): below that, whether envelopes are pending (the
        # slack) makes no difference.
        if not self.settled or not free_pages_over(conn, FREE_BYTES_KEPT):
            return
        if not any_pending(conn):
            self.release = True
            return
        self.busy = True
        self.release = free_pages_over(conn, 2 * FREE_BYTES_KEPT)


class HeldAcks:
    """Acknowledged events whose mark no transaction has written yet, and
    where the last mark's sweep of compacted rows ended. The inbox calls it
    under its lock: :meth:`take` before a transaction, :meth:`transact` for
    it, :meth:`marked` after its commit."""

    __slots__ = ("_db", "_done_kept", "_events", "_swept", "taken")

    def __init__(self, db: Database, done_kept: int) -> None:
        self._db = db
        self._done_kept = done_kept
        self._events: list[Outgoing] = []
        self._swept = 0
        """Compacted rows at or below this seq are deleted: the next sweep
        starts above it (0: from the start)."""
        self.taken = 0
        """How many times a transaction took what was held."""

    def __bool__(self) -> bool:
        return bool(self._events)

    def hold(self, events: Sequence[Outgoing]) -> None:
        self._events.extend(events)

    def take(self, last_seq: int) -> Marking | None:
        """Everything held, for the transaction about to run (None: nothing
        held); ``last_seq``: the inbox's processing position."""
        if not self._events:
            return None
        events, self._events = self._events, []
        self.taken += 1
        settles = [s for s in map(_settled, events) if s is not None]
        settled = list({s.dispatch_id for s in settles})
        keep_above = last_seq - self._done_kept
        # A done row's seq is the one its event carries (a parked row taken
        # again moves to a higher seq, pending): events processed above the
        # kept rows settle none that goes, a lone mail's always.
        past = any(s.seq is None or s.seq <= keep_above for s in settles)
        # A sweep a mail was a statement each lone mail for one row: they
        # gather to a sixteenth of the rows kept (at most that many more
        # bodiless rows stay in the file) and go in one.
        sweep = keep_above - self._swept >= max(1, self._done_kept // 16)
        return Marking(events, keep_above, self._swept, settled, past, sweep)

    async def transact(
        self, body: Body[T], marking: Marking | None, *, durable: bool = True, heavy: bool = False
    ) -> T:
        """``body`` (which writes ``marking`` too) in a transaction; the
        events are held again if it does not commit."""
        try:
            return await self._db.transact(body, durable=durable, heavy=heavy)
        except BaseException:
            if marking is not None:
                self._events[:0] = marking.events
            raise

    async def marked(self, marking: Marking | None) -> None:
        """After ``marking``'s commit: the sweep's start moves, and free
        pages go back to the file system when enough are free."""
        if marking is None:
            return
        if marking.settled and marking.sweep:
            self._swept = max(self._swept, marking.keep_above)
        if marking.release:
            slack = FREE_BYTES_KEPT if marking.busy else 0
            free = partial(release_free_pages, keep=FREE_BYTES_KEPT, slack=slack)
            await self._db.read(free, heavy=True)

    async def write(self, last_seq: int) -> None:
        """What is held, in a transaction of its own (none if nothing is)."""
        marking = self.take(last_seq)
        if marking is None:
            return
        # Not durable: these rows only say what the hub already holds. A
        # mark lost to a power failure is a frame sent again, which the
        # hub acknowledges without applying anything; the next durable
        # commit makes this one durable too. Waiting for the disk here
        # held the sidecar's loop that processing and deliveries wait on.
        await self.transact(marking.write, marking, durable=False)
        await self.marked(marking)

    def reset(self) -> None:
        """Forget everything held, and sweep from the start: the outbox was
        replaced and the position may have moved back (a takeover)."""
        self._events.clear()
        self._swept = 0
