"""The hub's acknowledgements of the outbox's events, held until a
transaction takes them.

An acknowledgement says the hub holds the events: their rows leave the
outbox, and the envelopes they settle drop their bodies. Nothing waits on
that mark and nobody is told of it; a mark lost to a crash is a frame sent
again, which the hub acknowledges without applying anything (it ingests by
event id). So it need not be a transaction of its own: it is held here, and
the inbox's next transaction (a batch of frames stored, a step's commit)
writes it with its own rows. Under steady mail that is within
milliseconds: a cycle is one transaction shorter. The shipper writes what
no transaction took within half a second (``sidecar/link/_shipper.py``),
the inbox writes it before it says it is at rest, so a sidecar never
sleeps with a mark unwritten, and when it closes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from runtime.sqlite import Body, Database, free_pages_over, release_free_pages

from ._outbox import Outgoing, any_pending, forget_acknowledged, settled_dispatch

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
        settled = list({d for d in map(settled_dispatch, events) if d is not None})
        return Marking(events, last_seq - self._done_kept, self._swept, settled)

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
        if marking.settled:
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
