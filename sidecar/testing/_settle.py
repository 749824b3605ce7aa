"""Coming to rest: the hub's accepted items written into the inbox, the
runs left to process them, the events they commit applied and
acknowledged, again until nothing moves.

The kit stands where the sidecar's delivery and shipper stand: it stores
envelopes (:meth:`Inbox.store`) and kicks the scheduler, waits until the
scheduler is idle with nothing it could take, then reads the outbox
(:meth:`Inbox.unacked`), hands each event to the hub's part and
acknowledges them (:meth:`Inbox.mark_acked`). Applying events may accept
more items (a child's start, a parent's child item, mail to the
deployment's own address): the loop goes on until a round applies nothing
and accepts nothing.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel

from runtime import Event, FrameDecoder

from ..execution import Runs
from ..storage import Inbox
from ._errors import NotSettled
from ._hub import KitHub

_events: FrameDecoder[Any] = FrameDecoder(Event)

OUTBOX_READ = 1000
"""Events read from the outbox per round."""


class Settler:
    """Brings one kit's runs to rest (:meth:`settle`)."""

    def __init__(self, hub: KitHub, inbox: Inbox, runs: Runs, patience: float) -> None:
        self._hub = hub
        self._inbox = inbox
        self._runs = runs
        self._patience = patience

    async def settle(self) -> None:
        """Raises :class:`NotSettled` when the runs are still busy after the
        kit's patience (a handler that mails itself for ever, say)."""
        try:
            with anyio.fail_after(self._patience):
                while True:
                    if new := self._hub.take():
                        await self._inbox.store(new)
                        self._runs.kick()
                    await self._idle()
                    if not await self._ship() and not self._hub.accepted_since:
                        break
        except TimeoutError:
            raise NotSettled(f"the runs were still busy after {self._patience}s") from None
        await self._refresh()

    async def _idle(self) -> None:
        """Until the scheduler has nothing in flight and nothing it can take."""
        while True:
            await anyio.lowlevel.checkpoint()  # the scheduler takes the kick
            await self._runs.idle.wait()
            # Idle from before the kick: the scheduler has not looked yet.
            if not await self._inbox.next_batch(1):
                return
            self._runs.kick()
            await anyio.lowlevel.checkpoint()

    async def _ship(self) -> bool:
        """The outbox's events applied and acknowledged; False: there were none."""
        rows = await self._inbox.unacked(OUTBOX_READ)
        if not rows:
            return False
        for _, out in rows:
            self._hub.apply(_events.decode(out.frame))
        await self._inbox.mark_acked([out for _, out in rows])
        return True

    async def _refresh(self) -> None:
        """Status and state as the sidecar holds them: no event says that a
        gate opened or a resume took, the run's record does."""
        for view in self._hub.runs.values():
            if view.ended:
                continue
            record = await self._inbox.load_run(view.run_id)
            if record.status is not None:
                view.status = record.status
                view.state = record.state
            if view.status != "suspended":
                view.suspended_on = None
