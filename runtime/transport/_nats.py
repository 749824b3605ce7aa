"""The NATS transport: nats-py behind the :class:`~runtime.Transport` seam.

The first connect is our own loop (backoff with jitter, cancellable), because
the server may start after us. Once connected, nats-py reconnects by itself
and replays every subscription; we pace its attempts with our backoff and
tell ``on_reconnect`` callbacks when it is back.

Whatever the outage, the transport keeps trying and never starves the event
loop: every attempt, ours or nats-py's, sleeps its backoff first (the delay is
finite for any attempt and the counter saturates), and nats-py is told never
to stop. Two ways nats-py can still give up are covered by a keeper task:
it closes a client for good on some server errors (an authorization
violation after a configuration reload), and its reconnect task could end
without reconnecting. Either way the keeper replaces the client with a
fresh one through our own connect loop, subscribes every subscription on it
again, and runs the ``on_reconnect`` callbacks, as after any reconnect.
"""

from __future__ import annotations

import logging
import time
from contextlib import suppress
from typing import Any

import anyio

from ..config import redact_url
from ..errors import TransportClosed, TransportError
from ..loops import Backoff, Flag, Retry, Wakeup
from ..wire import WIRE_MAX_PAYLOAD
from ._gone import Gone
from ._nats_edge import AttemptFailed, is_auth_error, mapped, servers_of
from ._nats_subscription import NatsSubscription
from ._natspy import Client, Msg, Server
from ._natspy import Subscription as NatsSub
from ._natspy import errors as nats_errors
from ._protocol import ReconnectCallback

log = logging.getLogger(__name__)

DEFAULT_BACKOFF = Backoff(initial=0.05, maximum=1.0)
"""Paces the first connect and nats-py's reconnects alike."""
_CLOSE_TIMEOUT = 2.0
_FLUSH_AFTER_RECONNECT = 10.0
"""How long nats-py's reconnect waits for its first PONG (its flush default)."""
_KEEPER_PERIOD = 1.0
"""How often the keeper looks whether nats-py's reconnecting still makes progress."""


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
    ) -> None:
        self.url = url
        self.shown_url = redact_url(url)
        """The URL as logs may show it: without credentials."""
        self.name = name
        self._connect_timeout = connect_timeout
        self._seed = seed
        self._inbox_prefix = inbox_prefix
        self._refused = False  # the server refused our credentials since the last connect
        self._warned: set[str] = set()  # error kinds logged at WARNING since the last connect
        self._nc = Client()
        self._gone = Gone()  # set once the current client is closed for good
        self._connecting_task: int | None = None
        self._closed = False
        self._callbacks: list[ReconnectCallback] = []
        self._subs: dict[NatsSub, NatsSubscription] = {}
        self._up = Flag()  # set while connected
        self._retry = Retry(backoff)  # connect attempts since the connection was last up
        self._last_try = time.monotonic()
        self._lost = Wakeup()  # nats-py closed the current client for good
        self._replacing = False  # the keeper is discarding the current client
        # An attempt of nats-py's takes at most its delay, a TCP connect, the
        # INFO and PONG waits and the flush after it; silence past that (and
        # some slack) means its reconnect task ended without reconnecting.
        self._stall_after = backoff.maximum + 4 * connect_timeout + _FLUSH_AFTER_RECONNECT + 5.0

    @property
    def is_connected(self) -> bool:
        return not self._closed and self._nc.is_connected

    @property
    def credentials_refused(self) -> bool:
        return self._refused

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    @property
    def reconnect_attempts(self) -> int:
        """Connect attempts since the connection was last up (saturating)."""
        return self._retry.failures

    async def connect(self) -> None:
        """Connect, retrying until the server answers; cancel to give up."""
        self._connecting_task = anyio.get_current_task().id
        try:
            while True:
                client, gone = Client(), Gone()
                try:
                    await client.connect(**self._options(client, gone))
                except (AttemptFailed, nats_errors.Error, OSError, TimeoutError) as exc:
                    cause = exc.__cause__ if isinstance(exc, AttemptFailed) else exc
                    if not (isinstance(cause, Exception) and self._refusal(cause)):
                        log.debug(
                            "connect to %s failed (attempt %d): %r",
                            self.shown_url,
                            self._retry.failures + 1,
                            cause,
                        )
                except BaseException:
                    await self._discard(client)
                    raise
                else:
                    self._nc, self._gone = client, gone
                    self._connected()
                    log.info("connected to NATS at %s as %s", self.shown_url, self.name)
                    if client.max_payload < WIRE_MAX_PAYLOAD:
                        log.warning(
                            "NATS at %s takes messages of at most %d bytes; mailrun's frames"
                            " need %d (the server's default max_payload)",
                            self.shown_url,
                            client.max_payload,
                            WIRE_MAX_PAYLOAD,
                        )
                    return
                await self._discard(client)
                self._retry.failed()
                await self._retry.wait()
        finally:
            self._connecting_task = None

    def _connected(self) -> None:
        self._refused = False
        self._warned.clear()
        self._retry.succeeded()
        self._up.set()

    def _options(self, client: Client, gone: Gone) -> dict[str, Any]:
        # The callbacks are this client's: a client being discarded (a failed
        # attempt, one the keeper replaced) must not speak for the current one.
        async def on_error(exc: Exception) -> None:
            await self._on_error(client, exc)

        def current() -> bool:
            return client is self._nc and not self._replacing

        async def on_disconnected() -> None:
            if current():
                await self._on_disconnected()

        async def on_reconnected() -> None:
            if current():
                await self._on_reconnected()

        async def on_closed() -> None:
            gone.set()  # whether current or being discarded: its requests end here
            if current():
                self._on_closed(client)

        # Passed as a dict because nats-py annotates its second counts as int.
        options: dict[str, Any] = {
            # A cluster: "nats://a:4222,nats://b:4222"; nats-py takes a list.
            "servers": servers_of(self.url),
            "name": self.name,
            "connect_timeout": self._connect_timeout,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,  # never give up: an outage may last any time
            "reconnect_time_wait": 0.2,  # unused: _pick_server returns the delay
            "reconnect_to_server_handler": self._pick_server,
            "ping_interval": 2,
            "max_outstanding_pings": 2,
            "error_cb": on_error,
            "disconnected_cb": on_disconnected,
            "reconnected_cb": on_reconnected,
            "closed_cb": on_closed,
        }
        if self._seed is not None:
            # nats-py signs the server's nonce with it; a server without
            # nkey users sends no nonce and ignores the key.
            options["nkeys_seed_str"] = self._seed
        if self._inbox_prefix is not None:
            options["inbox_prefix"] = self._inbox_prefix
        return options

    def _pick_server(
        self, servers: list[Server], _info: dict[str, Any]
    ) -> tuple[Server | None, float]:
        """nats-py's hook before each reconnect attempt: which server, and the
        delay to sleep first (nats-py has no jitter of its own).

        It must not raise: nats-py would retry at once, without sleeping or
        yielding, and spin the event loop for as long as it raised.
        """
        delay = self._retry.failed()
        self._last_try = time.monotonic()
        # The server that failed least, when a cluster is known.
        server = min(servers, key=lambda s: s.reconnects, default=None)
        return server, delay

    async def _discard(self, client: Client) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            try:
                await client.close()
            except Exception as exc:  # a half-set-up client; nothing left to save
                log.debug("closing NATS client failed: %r", exc)

    async def _on_error(self, client: Client, exc: Exception) -> None:
        if self._connecting_task == anyio.get_current_task().id:
            # Called from inside our connect attempt: end it here, or nats-py
            # would keep retrying at its own fixed pace.
            raise AttemptFailed from exc
        if client is not self._nc or self._replacing:
            return
        if isinstance(exc, nats_errors.SlowConsumerError):
            sub = self._subs.get(exc.sub)
            if sub is not None:
                sub.slow()
        elif isinstance(exc, OSError | nats_errors.StaleConnectionError):
            log.debug("NATS connection error: %r", exc)
        elif self._refusal(exc):
            pass
        else:
            # Once per kind of error until the next connect: an error that
            # comes back at every attempt of a long outage is news only once.
            kind = type(exc).__name__
            level = logging.DEBUG if kind in self._warned else logging.WARNING
            self._warned.add(kind)
            log.log(level, "NATS error: %r", exc)

    def _refusal(self, exc: Exception) -> bool:
        """Log a refusal of our credentials (once until the next connect); False
        for any other error."""
        if not is_auth_error(exc):
            return False
        # Once, not at every attempt: the identity was revoked (its deployment
        # deleted), or the server's config does not list it yet (not reloaded).
        level = logging.DEBUG if self._refused else logging.WARNING
        self._refused = True
        log.log(
            level, "NATS at %s refuses the credentials of %s: %r", self.shown_url, self.name, exc
        )
        return True

    async def _on_disconnected(self) -> None:
        self._up.clear()
        self._last_try = time.monotonic()
        if not self._closed:
            log.info("disconnected from NATS at %s; reconnecting", self.shown_url)

    def _on_closed(self, client: Client) -> None:
        self._up.clear()
        if self._closed:
            log.debug("NATS connection to %s closed", self.shown_url)
            return
        log.warning(
            "NATS client for %s was closed (%r); connecting again",
            self.shown_url,
            client.last_error,
        )
        self._lost.set()

    async def _on_reconnected(self) -> None:
        # Runs on nats-py's reconnect task after the subscriptions were
        # replayed, or on the keeper's after it subscribed them again.
        log.info("reconnected to NATS at %s", self.shown_url)
        self._connected()
        for callback in list(self._callbacks):
            try:
                await callback()
            except Exception:
                log.exception("reconnect callback %r failed", callback)

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        self._callbacks.append(callback)

    async def keep(self) -> None:
        """Replace a client nats-py has given up on; runs until cancelled."""
        while not self._closed:
            await self._lost.wait(_KEEPER_PERIOD)
            client = self._nc
            stalled = (
                not client.is_connected and time.monotonic() - self._last_try > self._stall_after
            )
            if self._closed or not (client.is_closed or stalled):
                continue
            if stalled and not client.is_closed:
                log.warning(
                    "NATS at %s: no reconnect attempt for %.0f s; connecting again",
                    self.shown_url,
                    self._stall_after,
                )
            await self._replace(client)

    async def _replace(self, old: Client) -> None:
        subs = list(self._subs.values())  # subscribed from now on: on the new client
        self._up.clear()
        self._gone.set()  # its requests go to the new client, even if nats-py never said closed
        self._replacing = True
        try:
            await self._discard(old)
            await self.connect()
        finally:
            self._replacing = False
        for sub in subs:
            if sub.closed:
                continue
            try:
                with mapped("subscribe to", self, sub.subject):
                    await sub.renew(self._nc)
            except TransportError as exc:
                # Lost again already: the next replacement tries again.
                log.warning("subscribing again to %s failed: %s", sub.subject, exc)
        await self._on_reconnected()

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
