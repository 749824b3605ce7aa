"""The search: the next batch to process, and whether there is one at all."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import partial
from typing import Any

from .._queue import Pending, RunRecord, next_batch, next_rows, read_run, run_record, run_rows
from ._state import InboxState


class Search(InboxState):
    """The next envelopes to process, found in the file or known to be none."""

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

    async def load_run(self, run_id: str) -> RunRecord:
        return run_record(run_id, await self.db.read(partial(read_run, run_id=run_id)))
