"""The hub's acknowledgements of the outbox's events, held until a
transaction takes them.

An acknowledgement says the hub holds the events: their rows leave the
outbox, and the envelopes they settle drop their bodies. Nothing waits on
that mark and nobody is told of it; a mark lost to a crash is a frame sent
again, which the hub acknowledges without applying anything (it ingests by
event id). So it need not be a transaction of its own: it is held here, and
the inbox's next durable transaction (a batch of frames stored, a step's
commit) writes it with its own rows. Under load that is within
milliseconds; a sidecar mailed once a second pays one transaction a mail
less. The shipper writes what no transaction took within a while
(``sidecar/link/_shipper.py``), and the inbox writes it before it says it
is at rest, so a sidecar never sleeps with a mark unwritten.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from runtime.sqlite import free_pages_over

from ._outbox import Outgoing, any_pending, forget_acknowledged, settled_dispatch

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
    """Acknowledged events whose mark no transaction has written yet."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: list[Outgoing] = []

    def __bool__(self) -> bool:
        return bool(self._events)

    def hold(self, events: Sequence[Outgoing]) -> None:
        self._events.extend(events)

    def take(self, *, keep_above: int, swept: int) -> Marking | None:
        """Everything held, for one transaction to write (None: nothing held);
        :meth:`give_back` it if that transaction does not commit."""
        if not self._events:
            return None
        events, self._events = self._events, []
        settled = list({d for d in map(settled_dispatch, events) if d is not None})
        return Marking(events, keep_above, swept, settled)

    def give_back(self, marking: Marking | None) -> None:
        """``marking``'s transaction rolled back: its events are held again."""
        if marking is not None:
            self._events[:0] = marking.events

    def drop(self) -> None:
        """Forget everything held: the outbox was replaced (a takeover)."""
        self._events.clear()
