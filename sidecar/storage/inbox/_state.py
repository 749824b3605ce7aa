"""What the inbox holds in memory, and what it knows of its rows without a query.

One SQLite file per deployment (``inbox.db``, WAL, ``synchronous=FULL``),
one connection (``runtime.sqlite.Database``). Every operation is a plain
function of the connection (the modules of ``sidecar/storage/`` hold them,
and all of the sidecar's SQL): a read runs on the event loop's thread, a
write is one transaction run whole, on the loop's thread while SQLite's
write lock is free (no other process writes here, so it is), except a batch
of frames of large bodies, stored on a worker thread (``Inbox.store``).
Batched work (a batch of frames, a batch of processed envelopes) is one
transaction, and the hub's acknowledgements ride on the next one
(``sidecar/storage/_outbox.py``). The
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

import sqlite3
from collections.abc import Sequence

import anyio

from runtime.sqlite import Database

from .._envelope import Envelope
from .._outbox import HeldAcks
from .._position import known_through
from .._queue import any_held

DONE_KEPT = 1000
"""Compacted rows kept behind the processing position (for an operator to
look at); older ones are deleted. A late copy of a deleted one is still a
duplicate: every seq at or below the position is done."""


class InboxState:
    """The state the inbox's operations share (each kind of them is a class
    of its own beside this one; ``Inbox`` is all of them)."""

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

    @property
    def last_seq(self) -> int:
        """The highest seq processed in order (every lower one is done too)."""
        return self._last_seq

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
