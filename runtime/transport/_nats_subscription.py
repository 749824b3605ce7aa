"""What a NATS subscription hands its reader: messages, and one subscription
that outlives the client it was made on (the keeper subscribes it again on
a new one, ``_nats``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Protocol

from ..loops import Broadcast
from ._natspy import Client, Msg
from ._natspy import Subscription as NatsSub
from ._natspy import errors as nats_errors
from ._protocol import Message

log = logging.getLogger("runtime.transport._nats")


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
    """One subscription read through nats-py's message iterator, carried over
    to the new client when the keeper replaces one."""

    def __init__(
        self, transport: SubscriptionOwner, sub: NatsSub, *, queue: str, max_pending: int
    ) -> None:
        self._transport = transport
        self._sub = sub
        self._queue = queue
        self._max_pending = max_pending
        self._renewed = Broadcast()
        self._closed = False
        self.dropped = 0
        """Messages the client discarded because this consumer fell behind."""

    @property
    def subject(self) -> str:
        return self._sub.subject

    @property
    def closed(self) -> bool:
        """Unsubscribed: never renewed."""
        return self._closed

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        while True:
            sub = self._sub
            try:
                msg = await sub.messages.__anext__()
            except StopAsyncIteration:
                # nats-py ends its iterator when the subscription or the client
                # closes: for good after unsubscribe or aclose, or until the
                # keeper has subscribed again on a new client.
                if self._closed or self._transport.closed:
                    raise
                if self._sub is sub:
                    await self._renewed.wait()
                continue
            return NatsMessage(self._transport, msg)

    async def renew(self, client: Client) -> None:
        """Subscribe again on ``client`` (the old one is closed)."""
        sub = await client.subscribe(
            self.subject, queue=self._queue, pending_msgs_limit=self._max_pending
        )
        self._transport.rekey(self._sub, sub, self)
        self._sub = sub
        self._renewed.notify()

    def end(self) -> None:
        """The transport closed: an iterator waiting for a renewal ends."""
        self._renewed.notify()

    async def unsubscribe(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._transport.forget(self._sub)
        self._renewed.notify()
        try:
            await self._sub.unsubscribe()
        except (nats_errors.ConnectionClosedError, nats_errors.BadSubscriptionError):
            pass  # already gone with its connection
        except (nats_errors.Error, OSError) as exc:
            log.debug("unsubscribe from %s failed: %r", self.subject, exc)
