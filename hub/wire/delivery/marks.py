"""Delivered marks held for the events' transaction: a lone mail's ack and
its events written in one commit, not two.

A sidecar acknowledges a frame once it has stored it, and ships the run
events of processing it about a millisecond later. Rather than a write
transaction of its own for the ``delivered`` mark, the settler *holds* the
acknowledged ids here, under the fence they were sent under, for at most
``wait`` seconds; the events handler of the same deployment *takes* every
mark held under its own fence and writes them in its transaction, before the
events it applies. A mark nobody took in time is written alone, as before.

Nothing is lost that was safe before: the mark was already a lazy write
(not ``durable``), and a dispatch whose mark never lands stays ``reserved``,
is sent again by a later pass, and is answered ``duplicate`` by the sidecar,
which settles it then. While a mark is held its dispatches stay in the
window (``window.py``), so no load sends them again meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ...store import Fence

DEFAULT_MARK_WAIT = 0.05
"""Seconds a mark waits for the events' transaction before it is written
alone: a lone mail's events follow its ack within a few milliseconds."""


@dataclass(eq=False)
class Held:
    """One settle's acknowledged dispatches, their ``delivered`` mark not written yet."""

    fence: Fence
    acked: list[str]
    at: float
    """When they were acknowledged: their ``delivered_at``."""
    wake: Callable[[], None]
    """Tells the holder that the mark was given back (to write it alone)."""
    done: Callable[[Held], None]
    """Tells the holder that the mark was written (on the writer's task)."""
    taken: bool = False
    """An events transaction has it now: it is written with it, or given back."""
    written: bool = False
    due: bool = False
    """Held for ``wait`` seconds already: the holder writes it alone."""
    timer: asyncio.TimerHandle | None = None
    """Wakes the holder once it is due (a loop timer: no task, no scope)."""


@dataclass(eq=False)
class Marks:
    """Every deployment's held marks: the settlers hold, the events handler takes."""

    wait: float = DEFAULT_MARK_WAIT
    _held: dict[str, list[Held]] = field(default_factory=dict)

    def hold(
        self,
        fence: Fence,
        acked: list[str],
        at: float,
        wake: Callable[[], None],
        done: Callable[[Held], None],
    ) -> Held:
        """Hold ``acked`` (acknowledged at ``at``) for the next events'
        transaction of its deployment under ``fence``: ``done`` is called
        once it is written there, ``wake`` if it is given back."""
        held = Held(fence, acked, at, wake, done)
        held.timer = asyncio.get_running_loop().call_later(self.wait, _due, held)
        self._held.setdefault(fence.deployment_id, []).append(held)
        return held

    def waiting(self, deployment_id: str) -> int:
        """How many of the deployment's dispatches wait here for their mark."""
        return sum(len(h.acked) for h in self._held.get(deployment_id, ()))

    def take(self, fence: Fence) -> list[Held]:
        """The marks held under ``fence`` (its deployment, epoch and lease),
        for a transaction under that fence to write: it calls :meth:`written`
        once it committed, :meth:`give_back` if it did not."""
        held = self._held.get(fence.deployment_id)
        if not held:
            return []
        taken = [h for h in held if h.fence == fence]
        if len(taken) == len(held):
            del self._held[fence.deployment_id]
        else:
            self._held[fence.deployment_id] = [h for h in held if h.fence != fence]
        for h in taken:
            h.taken = True
        return taken

    def written(self, taken: Iterable[Held]) -> None:
        """The transaction that took them committed: their marks are written."""
        for h in taken:
            h.written = True
            _stop(h)
            h.done(h)

    def give_back(self, taken: Iterable[Held]) -> None:
        """The transaction that took them did not commit: held again, for
        the settler to write alone (they may be due already)."""
        for h in taken:
            h.taken = False
            self._held.setdefault(h.fence.deployment_id, []).append(h)
            h.wake()

    def reclaim(self, held: Held) -> bool:
        """Take ``held`` back to write it alone: False while a transaction
        has it (it is written with it, or given back)."""
        if held.taken or held.written:
            return False
        _stop(held)
        mine = self._held.get(held.fence.deployment_id, [])
        if held in mine:
            mine.remove(held)
            if not mine:
                del self._held[held.fence.deployment_id]
        return True


def _due(held: Held) -> None:
    held.due, held.timer = True, None
    if not held.taken and not held.written:
        held.wake()


def _stop(held: Held) -> None:
    if held.timer is not None:
        held.timer.cancel()
        held.timer = None


__all__ = ["DEFAULT_MARK_WAIT", "Held", "Marks"]
