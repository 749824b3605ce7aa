"""The NATS transport: nats-py behind the :class:`~runtime.Transport` seam,
as callers use it: publish, request, subscribe, flush and close.

A request made while disconnected waits for the connection, and one sent on
a client nats-py then closes for good is sent again on the client that
replaces it. The transport owns the parts it runs on, each handed the
others it uses: the state of its current client (``_nats_hooks``'s
``Current``), the hooks nats-py calls on it (``NatsHooks``), and the
connection (``_nats_connection``: the first connect, the keeper).
"""

from __future__ import annotations

import logging
from contextlib import suppress

import anyio

from ..errors import TransportClosed
from ..loops import Backoff, Retry
from ._gone import Gone
from ._nats_connection import _CLOSE_TIMEOUT, NatsConnection, discard
from ._nats_edge import mapped
from ._nats_hooks import DEFAULT_BACKOFF, Current, Endpoint, NatsHooks
from ._nats_subscription import NatsSubscription
from ._natspy import Client, Msg
from ._natspy import Subscription as NatsSub
from ._natspy import errors as nats_errors
from ._protocol import ReconnectCallback

log = logging.getLogger(__name__)


class NatsTransport:
    """A :class:`~runtime.Transport` over one nats-py client. Use :func:`open_nats`."""

    def __init__(
        self,
        url: str,
        *,
        name: str,
        connect_timeout: float,
        seed: str | None = None,
        inbox_prefix: str | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        stall_after: float | None = None,
    ) -> None:
        """``stall_after``: seconds without a connect attempt after which
        nats-py's reconnect loop is taken to have stopped and its client is
        replaced; by default the longest attempt nats-py makes, with slack."""
        endpoint = Endpoint(url, name, connect_timeout, seed, inbox_prefix)
        self.url = url
        self.shown_url = endpoint.shown_url
        """The URL as logs may show it: without credentials."""
        self.name = name
        self._current = Current()
        self._retry = Retry(backoff)  # connect attempts since the connection was last up
        self._hooks = NatsHooks(endpoint, self._current, self._retry)
        self._connection = NatsConnection(
            endpoint, self._current, self._hooks, self._retry, backoff, stall_after
        )

    @property
    def _nc(self) -> Client:
        """The client it speaks through now."""
        return self._current.client

    @property
    def is_connected(self) -> bool:
        return not self._current.closed and self._nc.is_connected

    @property
    def credentials_refused(self) -> bool:
        return self._hooks.refused

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._current.closed

    @property
    def reconnect_attempts(self) -> int:
        """Connect attempts since the connection was last up (saturating)."""
        return self._retry.failures

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        self._hooks.on_reconnect(callback)

    async def connect(self) -> None:
        """Connect, retrying until the server answers; cancel to give up."""
        await self._connection.connect()

    async def keep(self) -> None:
        """Replace a client nats-py has given up on; runs until cancelled."""
        await self._connection.keep()

    def _check_open(self) -> None:
        if self._current.closed:
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
                if not self._current.up.is_set():
                    with anyio.fail_at(deadline):
                        await self._current.up.wait()
                client, gone = self._nc, self._current.gone
                msg = await self._ask(client, gone, subject, data, timeout, deadline)
                if msg is not None:
                    return msg.data
                self._check_open()
                # Closed for good: the keeper replaces it and sets up again.
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
        self._current.subs[sub] = wrapper
        return wrapper

    def forget(self, sub: NatsSub) -> None:
        self._current.subs.pop(sub, None)

    def rekey(self, old: NatsSub, new: NatsSub, wrapper: NatsSubscription) -> None:
        self._current.subs.pop(old, None)
        self._current.subs[new] = wrapper

    async def flush(self, timeout: float = 2.0) -> None:
        """Wait until the server has everything published so far (reconnecting first)."""
        self._check_open()
        with mapped("flush", self), anyio.fail_after(timeout):
            await self._flush()

    async def _flush(self) -> None:
        await self._current.up.wait()
        # nats-py writes the PING ahead of publishes its flusher task has not
        # written yet; the flusher runs during the first round trip, so the
        # second PING is behind every earlier publish.
        await self._nc.flush()
        await self._nc.flush()

    async def aclose(self) -> None:
        """Flush what was published, then close; bounded even if the server is gone."""
        if self._current.closed:
            return
        self._current.closed = True
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(_CLOSE_TIMEOUT / 2):
                if self._nc.is_connected:
                    try:
                        await self._flush()
                    except (nats_errors.Error, OSError) as exc:
                        log.debug("flush before close failed: %r", exc)
            await discard(self._nc)
        for sub in self._current.subs.values():
            sub.end()
        self._current.subs.clear()
