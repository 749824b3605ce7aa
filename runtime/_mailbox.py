"""A bounded mailbox: the actor kernel's queue.

An anyio memory object stream yields to the event loop on every send and
every receive, even when it need not wait (its checkpoint). For a mailbox
that is most of the cost of a message: the actor kernel ran at a fifth of a
bare ``asyncio.Queue`` handing messages back and forth, and at a fifteenth
with eight senders (``bench/actor_kernel.py``). This one waits only when it
must, like ``asyncio.Queue``: a send into room and a receive of a queued
message return at once. A sender on a full mailbox, or a receiver on an empty
one, waits on an event and can be cancelled there without losing anything:
nothing is taken or added until the wait is over. Waiting senders queue, and
each message taken wakes one of them (a cancelled one passes its turn on),
not every one. A producer cannot starve the loop for long: the mailbox is
bounded, and a full one makes it wait.

Closing is the sender's end (``close``): queued messages are still
received, then :class:`anyio.EndOfStream`; a send after it raises
:class:`anyio.ClosedResourceError`.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class Mailbox(Generic[T]):
    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a mailbox holds at least one message")
        self._size = size
        self._items: deque[T] = deque()
        self._closed = False
        self._arrived = anyio.Event()  # set when a message came or the mailbox closed
        self._senders: deque[anyio.Event] = deque()  # senders waiting for room, in order

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
        self._arrived.set()

    async def send(self, item: T) -> None:
        """Queue ``item``, waiting for room while the mailbox is full."""
        while True:
            try:
                self.send_nowait(item)
                return
            except anyio.WouldBlock:
                turn = anyio.Event()
                self._senders.append(turn)
                try:
                    await turn.wait()
                except BaseException:
                    if turn.is_set():
                        self._wake_sender()  # woken, then cancelled: the next one's turn
                    else:
                        self._senders.remove(turn)
                    raise

    def _wake_sender(self) -> None:
        if self._senders:
            self._senders.popleft().set()

    def receive_nowait(self) -> T:
        """The oldest message; :class:`anyio.WouldBlock` when there is none,
        :class:`anyio.EndOfStream` once closed and drained."""
        if self._items:
            item = self._items.popleft()
            self._wake_sender()
            return item
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        """The oldest message, waiting for one while the mailbox is empty."""
        while True:
            try:
                return self.receive_nowait()
            except anyio.WouldBlock:
                if self._arrived.is_set():
                    self._arrived = anyio.Event()
                await self._arrived.wait()

    def close(self) -> None:
        """No more sends; what is queued is still received."""
        self._closed = True
        self._arrived.set()
        while self._senders:
            self._senders.popleft().set()
