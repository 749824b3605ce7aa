"""Delivery: the hub's frames stored, its floor, and a takeover from its state."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from functools import partial

from runtime import RunSnapshot

from .._adopt import adopt_hub_state
from .._attempts import RetryRow, revive_parked
from .._envelope import Envelope, encode_envelope
from .._intake import EnvelopeRow, insert_envelopes, keep_dead_letters, known_dispatches, learn_seqs
from .._position import advance_over_done, highest_seq, skip_up_to
from .._recorded import dispatches_with_steps
from ._state import InboxState

ON_LOOP_BYTES = 64 * 1024
"""A batch of envelopes at most this large is stored on the loop's thread;
a larger one on a worker thread (:meth:`Inbox.store`)."""


class Delivery(InboxState):
    """The hub's frames in, its floor, its state taken over."""

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
