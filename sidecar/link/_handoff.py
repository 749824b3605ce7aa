"""A bounded hand-off between two tasks of the hub link (delivery's pump
and its writer): the taker gets everything waiting at once, and neither
side gives the loop a turn unless it has to wait.

An ``anyio`` memory object stream checkpoints in every ``send`` and
``receive``: a turn of the event loop each, two of them a lone mail
between delivery's pump and its writer. Here a ``put`` into room and a
``take`` of what is there run straight on; a side that has to wait (the
other one is behind, or there is nothing yet) waits on an event, which
cancellation ends as any wait.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from runtime.loops import Broadcast, Wakeup

T = TypeVar("T")


class Handoff(Generic[T]):
    """Items from one task to another, in order, at most ``size`` waiting;
    :meth:`close` once no more come."""

    def __init__(self, size: int) -> None:
        self._items: deque[T] = deque()
        self._size = max(1, size)
        self._came = Wakeup()
        self._taken = Broadcast()
        self._closed = False

    async def put(self, item: T) -> None:
        """Add ``item``, once there is room for it."""
        while len(self._items) >= self._size:
            await self._taken.wait()
        self._items.append(item)
        self._came.set()

    async def take(self, limit: int) -> list[T]:
        """Up to ``limit`` items, oldest first, once there is one; none once
        closed and empty."""
        while not self._items:
            if self._closed:
                return []
            await self._came.wait()
        full = len(self._items) >= self._size
        batch = [self._items.popleft() for _ in range(min(limit, len(self._items)))]
        if not self._items and not self._closed:
            self._came.clear()  # what set it is taken: the next take waits
        if full:
            self._taken.notify()  # a put may wait for room
        return batch

    def close(self) -> None:
        """No more items: a :meth:`take` after the last of them gets none."""
        self._closed = True
        self._came.set()
