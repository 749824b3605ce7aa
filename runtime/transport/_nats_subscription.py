"""What a NATS subscription hands its reader: messages, and one subscription
that outlives the client it was made on (the keeper subscribes it again on
a new one, ``_nats_connection``).

Messages come through nats-py's callback form (``subscribe(cb=...)``), not
its message iterator: the iterator makes a task and an ``asyncio.wait`` for
every message it yields, where the callback runs in the one task nats-py
keeps for the subscription, and appends to a buffer of ours that the reader
takes from without waiting while it holds messages.

The bound: at most ``max_pending`` messages (and
``PENDING_BYTES`` of data) wait in that buffer for the reader; a message
that finds it full is dropped and counted (``dropped``), the newest first,
as NATS drops for a slow consumer. nats-py's own queue before the callback
has the same bounds and drops (counted alike, through the transport's error
callback); it holds what one read of the socket brought until its task runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Protocol

from ._natspy import Client, Msg
from ._natspy import Subscription as NatsSub
from ._natspy import errors as nats_errors
from ._protocol import Message

log = logging.getLogger("runtime.transport._nats")

PENDING_BYTES = 64 * 1024 * 1024
"""Data at most waiting for the reader in a subscription's buffer (and as
much again in nats-py's queue: nats-py's default bound, 128 MiB, in all)."""


class SubscriptionOwner(Protocol):
    """What a subscription and its messages use of their transport."""

    @property
    def closed(self) -> bool: ...

    async def publish(self, subject: str, data: bytes) -> None: ...

    def forget(self, sub: NatsSub) -> None:
        """``sub`` was unsubscribed: nothing renews it."""
        ...

    def rekey(self, old: NatsSub, new: NatsSub, wrapper: NatsSubscription) -> None:
        """``wrapper`` reads ``new`` now, in place of ``old``."""
        ...


class NatsMessage:
    """A received NATS message; ``respond`` publishes on its reply subject."""

    __slots__ = ("_msg", "_transport")

    def __init__(self, transport: SubscriptionOwner, msg: Msg) -> None:
        self._transport = transport
        self._msg = msg

    @property
    def subject(self) -> str:
        return self._msg.subject

    @property
    def data(self) -> bytes:
        return self._msg.data

    @property
    def reply(self) -> str | None:
        return self._msg.reply or None

    async def respond(self, data: bytes) -> None:
        if self._msg.reply:
            await self._transport.publish(self._msg.reply, data)


class NatsSubscription:
    """One subscription fed by nats-py's callback, carried over to the new
    client when the keeper replaces one."""

    def __init__(
        self, transport: SubscriptionOwner, subject: str, *, queue: str, max_pending: int
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._transport = transport
        self._subject = subject
        self._sub: NatsSub | None = None
        self._queue = queue
        self._max_pending = max_pending
        self._buffer: deque[Msg] = deque()
        self._bytes = 0
        # The readers waiting for a message (one, as a rule), each on a bare
        # asyncio future: the transport runs on anyio's asyncio backend, and
        # a future is the least a wait that a callback ends can cost.
        self._readers: list[asyncio.Future[None]] = []
        self._closed = False
        self._ended = False
        self.dropped = 0
        """Messages discarded because this consumer fell behind."""

    @property
    def subject(self) -> str:
        return self._subject

    @property
    def closed(self) -> bool:
        """Unsubscribed: never renewed."""
        return self._closed

    async def subscribe(self, client: Client) -> NatsSub:
        """Subscribe on ``client``: the first time, and again on a new one."""
        sub = await client.subscribe(
            self._subject,
            queue=self._queue,
            cb=self._deliver,
            pending_msgs_limit=self._max_pending,
            pending_bytes_limit=PENDING_BYTES,
        )
        self._sub = sub
        return sub

    async def _deliver(self, msg: Msg) -> None:
        # nats-py's task for this subscription: it must not wait here (the
        # messages behind would queue in nats-py instead), so a full buffer
        # drops, as NATS does for a slow consumer.
        size = len(msg.data)
        if len(self._buffer) >= self._max_pending or self._bytes + size > PENDING_BYTES:
            self.slow()
            return
        self._buffer.append(msg)
        self._bytes += size
        self._wake()

    def _wake(self) -> None:
        readers, self._readers = self._readers, []
        for reader in readers:
            if not reader.done():  # else cancelled: its task is ending
                reader.set_result(None)

    def slow(self) -> None:
        """A message for this subscription was dropped: the reader fell behind."""
        self.dropped += 1
        if self.dropped & (self.dropped - 1) == 0:  # 1, 2, 4, ...: log, don't flood
            log.warning("slow consumer on %s: %d dropped", self.subject, self.dropped)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        buffer = self._buffer
        while not buffer:
            if self._ended or self._transport.closed:
                raise StopAsyncIteration
            # Nothing buffered, and nothing arrives between this look and the
            # wait: a message that comes next completes this future.
            reader = asyncio.get_running_loop().create_future()
            self._readers.append(reader)
            try:
                await reader
            except BaseException:
                # Cancelled while waiting (asyncio cancels the future with its
                # task): off the list, which only a message empties. Woken
                # first, the message stays buffered for the next read.
                if reader.cancelled() or not reader.done():
                    reader.cancel()
                    with suppress(ValueError):
                        self._readers.remove(reader)
                raise
        msg = buffer.popleft()
        self._bytes -= len(msg.data)
        return NatsMessage(self._transport, msg)

    async def renew(self, client: Client) -> None:
        """Subscribe again on ``client`` (the old one is closed). What the
        buffer holds is still read."""
        old = self._sub
        assert old is not None, "subscribed first"
        new = await self.subscribe(client)
        self._transport.rekey(old, new, self)

    def end(self) -> None:
        """The transport closed: what is buffered is dropped, as the client
        drops what it holds, and the reader's iteration ends."""
        self._ended = True
        self._buffer.clear()
        self._bytes = 0
        self._wake()

    async def unsubscribe(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.end()
        sub = self._sub
        assert sub is not None, "subscribed first"
        self._transport.forget(sub)
        try:
            await sub.unsubscribe()
        except (nats_errors.ConnectionClosedError, nats_errors.BadSubscriptionError):
            pass  # already gone with its connection
        except (nats_errors.Error, OSError) as exc:
            log.debug("unsubscribe from %s failed: %r", self.subject, exc)
