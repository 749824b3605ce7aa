"""What processing writes: in-flight marks, recorded steps, and a step's commit."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from functools import partial

from runtime import DispatchOutcome, is_terminal
from runtime.wire import StepRecorded

from ..._errors import InboxConflict
from .._attempts import charge_crash, clear_in_flight, mark_in_flight
from .._queue import ended_meanwhile
from .._recorded import read_steps, record_step
from .._step import Commit, write_step
from ._state import InboxState

ENDED_KEPT = 4096
"""Runs cancelled by a parent's end the inbox remembers, at most; past
that, every commit looks whether its run ended meanwhile (a query each)."""


class Processing(InboxState):
    """What a run's actor writes as it processes a batch."""

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
