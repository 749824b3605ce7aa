"""The NATS transport's state, and the hooks nats-py calls on its client: the
options a client is made with, the server and the delay before each of its
reconnect attempts (our backoff, with jitter: nats-py has none), and what it
reports: errors, a refusal of our credentials, disconnects, a close for
good, a reconnect (then the ``on_reconnect`` callbacks run).

Each client gets hooks of its own: a client being discarded (a failed
attempt, one the keeper replaced, ``_nats_connection``) must not speak for
the current one.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio

from ..config import redact_url
from ..loops import Backoff, Flag, Retry, Wakeup
from ._gone import Gone
from ._nats_edge import AttemptFailed, is_auth_error, servers_of
from ._nats_subscription import NatsSubscription
from ._natspy import Client, Server
from ._natspy import Subscription as NatsSub
from ._natspy import errors as nats_errors
from ._protocol import ReconnectCallback

# The transport logs under one name, ``_nats``'s, whichever module of it speaks.
log = logging.getLogger("runtime.transport._nats")

DEFAULT_BACKOFF = Backoff(initial=0.05, maximum=1.0)
"""Paces the first connect and nats-py's reconnects alike."""
_FLUSH_AFTER_RECONNECT = 10.0
"""How long nats-py's reconnect waits for its first PONG (its flush default)."""


class NatsHooks:
    """What nats-py tells the transport about its current client, and what
    the transport remembers of it. The connect loop and the keeper are
    :class:`~runtime.transport._nats_connection.NatsConnection`'s."""

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
