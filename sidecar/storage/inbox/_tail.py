"""The outbox's tail in memory: a commit's events handed to the shipper's
next read, which need not read the file for what was just written.

After a step's commit the shipper reads the outbox past the last event the
hub acknowledged: a read of its own (a read on the database, the runtime's
pragmas around it, a SELECT) that finds the rows the commit had just
written. :class:`OutboxTail` holds "every unacknowledged row past position
``after`` is in ``rows``" once a read of the file reached the outbox's end;
a commit appends its events with their positions, and a read past
``after`` is answered from it.

Every write of the outbox holds the inbox's lock and does its bookkeeping
before letting go of it, so two writes never interleave here; only the
shipper's reads (which do not take that lock) may come between a write's
transaction and its bookkeeping, and find its rows in the file: a commit
appends only rows past the tail's last. Any other write of unacknowledged
rows (a recorded step, the cancellations a run's end writes for its
children, a set-aside event, a takeover) forgets the tail once its
transaction is done, so the next read goes to the file. The rows an
acknowledgement's mark deletes leave it after that mark's commit; a read
in between may still find them, and an event goes again, which the hub
applies once (by event id). A row is never missing from the tail, which
is what would hold an event back.
"""

from __future__ import annotations

from .._outbox import Outgoing

Rows = list[tuple[int, Outgoing]]


class OutboxTail:
    __slots__ = ("_after", "_rows")

    def __init__(self) -> None:
        self._rows: Rows | None = None
        """Every unacknowledged row past ``_after``, in order (None: not known)."""
        self._after = 0

    @property
    def kept(self) -> bool:
        """Whether a commit's events are worth their positions."""
        return self._rows is not None

    def read(self, limit: int, after: int) -> Rows | None:
        """The first ``limit`` unacknowledged rows past ``after``; None when
        only the file can tell."""
        rows = self._rows
        if rows is None or after < self._after:
            return None
        if rows and rows[0][0] <= after:
            rows = self._rows = [row for row in rows if row[0] > after]
        self._after = after
        return rows[:limit]

    def read_from_file(self, rows: Rows, limit: int, after: int) -> None:
        """What a read of the file past ``after`` found: the tail, when it
        reached the outbox's end."""
        self._rows, self._after = (list(rows), after) if len(rows) < limit else (None, 0)

    def wrote(self, rows: Rows) -> None:
        """A commit's events, in order, with their positions."""
        if self._rows is None:
            return
        last = self._rows[-1][0] if self._rows else self._after
        self._rows.extend(row for row in rows if row[0] > last)

    def acknowledged(self, event_ids: set[str]) -> None:
        """Rows an acknowledgement's mark deleted."""
        if self._rows:
            self._rows = [row for row in self._rows if row[1].event_id not in event_ids]

    def forget(self) -> None:
        """Rows were written, or unacknowledged ones deleted, some other way."""
        self._rows = None
