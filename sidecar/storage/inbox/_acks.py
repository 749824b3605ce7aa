"""The hub's acknowledgements, the outbox it reads, and whether the inbox is at rest."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

from .._outbox import Outgoing, set_aside, unacked_events
from .._position import at_rest
from ._state import InboxState


class Acks(InboxState):
    """The outbox the shipper reads, and the hub's acknowledgements of it."""

    async def at_rest(self) -> bool:
        """Nothing left to process, nothing left for the hub to take (an
        acknowledgement held is written first: no sidecar sleeps with one)."""
        await self.write_acked()
        return await self.db.read(at_rest)

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
