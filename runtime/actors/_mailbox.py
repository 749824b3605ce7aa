"""A bounded mailbox: the actor kernel's queue.

An anyio memory object stream yields to the event loop on every send and
every receive, even when it need not wait (its checkpoint). For a mailbox
that is most of the cost of a message: the actor kernel ran at a fifth of a
bare ``asyncio.Queue`` handing messages back and forth, and at a fifteenth
with eight senders (``bench/parts/actor_kernel.py``). This one waits only when it
must, like ``asyncio.Queue``: a send into room and a receive of a queued
message return at once. A sender on a full mailbox, or a receiver on an empty
one, waits on a bare asyncio future (cheaper than a fresh ``anyio.Event``
per wait; the runtime runs on anyio's asyncio backend) and can be cancelled
there without losing anything: nothing is taken or added until the wait is
over. Waiters queue, and each message sent wakes one receiver, each message
taken one sender (one woken, then cancelled, passes its turn on), not every
one. A producer cannot starve the loop for long: the mailbox is bounded, and
a full one makes it wait.

Closing is the sender's end (``close``): queued messages are still
received, then :class:`anyio.EndOfStream`; a send after it raises
:class:`anyio.ClosedResourceError`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import suppress
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class Mailbox(Generic[T]):
    __slots__ = ("_closed", "_items", "_receivers", "_senders", "_size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a mailbox holds at least one message")
        self._size = size
        self._items: deque[T] = deque()
        self._closed = False
        # Who waits, in order: each a future that a message (receivers) or
        # room (senders) completes; closing completes them all.
        self._receivers: deque[asyncio.Future[None]] = deque()
        self._senders: deque[asyncio.Future[None]] = deque()

    @property
    def closed(self) -> bool:
        return self._closed

    def send_nowait(self, item: T) -> None:
        """Queue ``item``; :class:`anyio.WouldBlock` when full."""
        if self._closed:
            raise anyio.ClosedResourceError
        if len(self._items) >= self._size:
            raise anyio.WouldBlock
        self._items.append(item)
        if self._receivers:
            _wake_one(self._receivers)

    async def send(self, item: T) -> None:
        """Queue ``item``, waiting for room while the mailbox is full."""
        while not self._closed and len(self._items) >= self._size:
            await _wait_turn(self._senders)
        self.send_nowait(item)

    def receive_nowait(self) -> T:
        """The oldest message; :class:`anyio.WouldBlock` when there is none,
        :class:`anyio.EndOfStream` once closed and drained."""
        if self._items:
            return self._take()
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        """The oldest message, waiting for one while the mailbox is empty."""
        while not self._items:
            if self._closed:
                raise anyio.EndOfStream
            await _wait_turn(self._receivers)
        return self._take()

    def _take(self) -> T:
        item = self._items.popleft()
        if self._senders:
            _wake_one(self._senders)
        return item

    def close(self) -> None:
        """No more sends; what is queued is still received."""
        self._closed = True
        for waiters in (self._receivers, self._senders):
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)


def _wake_one(waiters: deque[asyncio.Future[None]]) -> None:
    """Complete the first waiter still waiting (a cancelled one is skipped)."""
    while waiters:
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return


async def _wait_turn(waiters: deque[asyncio.Future[None]]) -> None:
    """Queue up in ``waiters`` until woken. Cancelled after being woken, the
    turn passes to the next waiter, so a wakeup is never lost."""
    waiter = asyncio.get_running_loop().create_future()
    waiters.append(waiter)
    try:
        await waiter
    except BaseException:
        if waiter.done() and not waiter.cancelled():
            _wake_one(waiters)
        else:
            waiter.cancel()
            with suppress(ValueError):  # already taken off by close
                waiters.remove(waiter)
        raise
