"""The NATS transport: nats-py behind the :class:`~runtime.Transport` seam,
as callers use it: publish, request, subscribe, flush and close.

A request made while disconnected waits for the connection, and one sent on
a client nats-py then closes for good is sent again on the client that
replaces it. The connection it all runs on is ``_nats_connection``'s (the
first connect, the keeper) over ``_nats_hooks`` (what nats-py tells us).
"""

from __future__ import annotations

import logging
from contextlib import suppress

import anyio

from ..errors import TransportClosed
from ._gone import Gone
from ._nats_connection import _CLOSE_TIMEOUT, NatsConnection
from ._nats_edge import mapped
from ._nats_subscription import NatsSubscription
from ._natspy import Client, Msg
from ._natspy import Subscription as NatsSub
from ._natspy import errors as nats_errors

log = logging.getLogger(__name__)


class NatsTransport(NatsConnection):
    """A :class:`~runtime.Transport` over one nats-py client. Use :func:`open_nats`."""

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosed(f"transport {self.name!r} is closed")

    async def publish(self, subject: str, data: bytes) -> None:
        self._check_open()
        with mapped("publish to", self, subject):
            await self._nc.publish(subject, data)

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        """Ask and wait for the answer, within ``timeout`` whatever happens.

        Made while disconnected, it waits for the connection. Sent on a
        client nats-py then closes for good (the server closed it, say),
        it is sent again on the client that replaces it: the answer could
        never come on the closed one. Its responder may then see it twice,
        as when a caller sends again after a timeout."""
        self._check_open()
        deadline = anyio.current_time() + timeout
        with mapped("request to", self, subject):
            while True:
                if not self._up.is_set():
                    with anyio.fail_at(deadline):
                        await self._up.wait()
                client, gone = self._nc, self._gone
                msg = await self._ask(client, gone, subject, data, timeout, deadline)
                if msg is not None:
                    return msg.data
                self._check_open()
                # Closed for good: the keeper replaces it and sets _up again.
                with anyio.fail_at(deadline):
                    await gone.wait()

    async def _ask(
        self, client: Client, gone: Gone, subject: str, data: bytes, timeout: float, deadline: float
    ) -> Msg | None:
        """The answer, or None when ``client`` was closed for good first.

        Connected, a request enters this one cancel scope (the client's end
        and the deadline together): a lone mail makes one request each way."""
        answer: Msg | None = None
        # Closed before it was sent: sent again on the next client.
        with gone.asking(deadline) as scope, suppress(nats_errors.ConnectionClosedError):
            answer = await client.request(subject, data, timeout=timeout)
        if scope.cancelled_caught and not gone.is_set():
            raise TimeoutError  # the deadline, not the end (``mapped``: RequestTimeout)
        return answer

    async def subscribe(
        self, subject: str, *, queue: str | None = None, max_pending: int = 4096
    ) -> NatsSubscription:
        self._check_open()
        wrapper = NatsSubscription(self, subject, queue=queue or "", max_pending=max_pending)
        with mapped("subscribe to", self, subject):
            sub = await wrapper.subscribe(self._nc)
        self._subs[sub] = wrapper
        return wrapper

    def forget(self, sub: NatsSub) -> None:
        self._subs.pop(sub, None)

    def rekey(self, old: NatsSub, new: NatsSub, wrapper: NatsSubscription) -> None:
        self._subs.pop(old, None)
        self._subs[new] = wrapper

    async def flush(self, timeout: float = 2.0) -> None:
        """Wait until the server has everything published so far (reconnecting first)."""
        self._check_open()
        with mapped("flush", self), anyio.fail_after(timeout):
            await self._flush()

    async def _flush(self) -> None:
        await self._up.wait()
        # nats-py writes the PING ahead of publishes its flusher task has not
        # written yet; the flusher runs during the first round trip, so the
        # second PING is behind every earlier publish.
        await self._nc.flush()
        await self._nc.flush()

    async def aclose(self) -> None:
        """Flush what was published, then close; bounded even if the server is gone."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(_CLOSE_TIMEOUT / 2):
                if self._nc.is_connected:
                    try:
                        await self._flush()
                    except (nats_errors.Error, OSError) as exc:
                        log.debug("flush before close failed: %r", exc)
            await self._discard(self._nc)
        for sub in self._subs.values():
            sub.end()
        self._subs.clear()
