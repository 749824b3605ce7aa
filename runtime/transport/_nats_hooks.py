"""The NATS transport's state, and the hooks nats-py calls on its client:
where it connects (:class:`Endpoint`), the client it speaks through now and
what is known of it (:class:`Current`: up, closed for good, being replaced,
its subscriptions), and what nats-py tells (:class:`NatsHooks`): the options
a client is made with, the server and the delay before each of its
reconnect attempts (our backoff, with jitter: nats-py has none), errors, a
refusal of our credentials, disconnects, a close for good, a reconnect
(then the ``on_reconnect`` callbacks run).

Each client gets hooks of its own: a client being discarded (a failed
attempt, one the keeper replaced, ``_nats_connection``) must not speak for
the current one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Endpoint:
    """Where the transport connects, and as whom."""

    url: str
    name: str
    connect_timeout: float
    seed: str | None = None
    inbox_prefix: str | None = None
    shown_url: str = field(init=False)
    """The URL as logs may show it: without credentials."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown_url", redact_url(self.url))


class Current:
    """The client the transport speaks through now, and what is known of it."""

    def __init__(self) -> None:
        self.client = Client()
        self.gone = Gone()  # set once the current client is closed for good
        self.up = Flag()  # set while connected
        self.closed = False  # the transport's aclose was called
        self.replacing = False  # the keeper is discarding the current client
        self.subs: dict[NatsSub, NatsSubscription] = {}

    def speaks_for(self, client: Client) -> bool:
        """Whether what ``client`` reports is news of the transport's connection."""
        return client is self.client and not self.replacing


class NatsHooks:
    """What nats-py tells the transport about its current client. The
    connect loop and the keeper are
    :class:`~runtime.transport._nats_connection.NatsConnection`'s."""

    def __init__(self, endpoint: Endpoint, current: Current, retry: Retry) -> None:
        self._endpoint = endpoint
        self._current = current
        self._retry = retry  # connect attempts since the connection was last up
        self.refused = False  # the server refused our credentials since the last connect
        self._warned: set[str] = set()  # error kinds logged at WARNING since the last connect
        self._connecting_task: int | None = None
        self._callbacks: list[ReconnectCallback] = []
        self.last_try = time.monotonic()
        """When nats-py last began a reconnect attempt (or the connection was lost)."""
        self.lost = Wakeup()  # nats-py closed the current client for good

    @contextmanager
    def attempting(self) -> Iterator[None]:
        """Our connect attempts run inside: an error nats-py reports from
        their task ends the attempt (:meth:`on_error`)."""
        self._connecting_task = anyio.get_current_task().id
        try:
            yield
        finally:
            self._connecting_task = None

    def connected(self) -> None:
        self.refused = False
        self._warned.clear()
        self._retry.succeeded()
        self._current.up.set()

    def options(self, client: Client, gone: Gone) -> dict[str, Any]:
        # The callbacks are this client's: a client being discarded (a failed
        # attempt, one the keeper replaced) must not speak for the current one.
        current = self._current

        async def on_error(exc: Exception) -> None:
            await self.on_error(client, exc)

        async def on_disconnected() -> None:
            if current.speaks_for(client):
                await self.on_disconnected()

        async def on_reconnected() -> None:
            if current.speaks_for(client):
                await self.on_reconnected()

        async def on_closed() -> None:
            gone.set()  # whether current or being discarded: its requests end here
            if current.speaks_for(client):
                self.on_closed(client)

        endpoint = self._endpoint
        # Passed as a dict because nats-py annotates its second counts as int.
        options: dict[str, Any] = {
            # A cluster: "nats://a:4222,nats://b:4222"; nats-py takes a list.
            "servers": servers_of(endpoint.url),
            "name": endpoint.name,
            "connect_timeout": endpoint.connect_timeout,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,  # never give up: an outage may last any time
            "reconnect_time_wait": 0.2,  # unused: pick_server returns the delay
            "reconnect_to_server_handler": self.pick_server,
            "ping_interval": 2,
            "max_outstanding_pings": 2,
            "error_cb": on_error,
            "disconnected_cb": on_disconnected,
            "reconnected_cb": on_reconnected,
            "closed_cb": on_closed,
        }
        if endpoint.seed is not None:
            # nats-py signs the server's nonce with it; a server without
            # nkey users sends no nonce and ignores the key.
            options["nkeys_seed_str"] = endpoint.seed
        if endpoint.inbox_prefix is not None:
            options["inbox_prefix"] = endpoint.inbox_prefix
        return options

    def pick_server(
        self, servers: list[Server], _info: dict[str, Any]
    ) -> tuple[Server | None, float]:
        """nats-py's hook before each reconnect attempt: which server, and the
        delay to sleep first (nats-py has no jitter of its own).

        It must not raise: nats-py would retry at once, without sleeping or
        yielding, and spin the event loop for as long as it raised.
        """
        delay = self._retry.failed()
        self.last_try = time.monotonic()
        # The server that failed least, when a cluster is known.
        server = min(servers, key=lambda s: s.reconnects, default=None)
        return server, delay

    async def on_error(self, client: Client, exc: Exception) -> None:
        if self._connecting_task == anyio.get_current_task().id:
            # Called from inside our connect attempt: end it here, or nats-py
            # would keep retrying at its own fixed pace.
            raise AttemptFailed from exc
        if not self._current.speaks_for(client):
            return
        if isinstance(exc, nats_errors.SlowConsumerError):
            sub = self._current.subs.get(exc.sub)
            if sub is not None:
                sub.slow()
        elif isinstance(exc, OSError | nats_errors.StaleConnectionError):
            log.debug("NATS connection error: %r", exc)
        elif self.refusal(exc):
            pass
        else:
            # Once per kind of error until the next connect: an error that
            # comes back at every attempt of a long outage is news only once.
            kind = type(exc).__name__
            level = logging.DEBUG if kind in self._warned else logging.WARNING
            self._warned.add(kind)
            log.log(level, "NATS error: %r", exc)

    def refusal(self, exc: Exception) -> bool:
        """Log a refusal of our credentials (once until the next connect); False
        for any other error."""
        if not is_auth_error(exc):
            return False
        # Once, not at every attempt: the identity was revoked (its deployment
        # deleted), or the server's config does not list it yet (not reloaded).
        level = logging.DEBUG if self.refused else logging.WARNING
        self.refused = True
        endpoint = self._endpoint
        log.log(
            level,
            "NATS at %s refuses the credentials of %s: %r",
            endpoint.shown_url,
            endpoint.name,
            exc,
        )
        return True

    async def on_disconnected(self) -> None:
        self._current.up.clear()
        self.last_try = time.monotonic()
        if not self._current.closed:
            log.info("disconnected from NATS at %s; reconnecting", self._endpoint.shown_url)

    def on_closed(self, client: Client) -> None:
        self._current.up.clear()
        if self._current.closed:
            log.debug("NATS connection to %s closed", self._endpoint.shown_url)
            return
        log.warning(
            "NATS client for %s was closed (%r); connecting again",
            self._endpoint.shown_url,
            client.last_error,
        )
        self.lost.set()

    async def on_reconnected(self) -> None:
        # Runs on nats-py's reconnect task after the subscriptions were
        # replayed, or on the keeper's after it subscribed them again.
        log.info("reconnected to NATS at %s", self._endpoint.shown_url)
        self.connected()
        for callback in list(self._callbacks):
            try:
                await callback()
            except Exception:
                log.exception("reconnect callback %r failed", callback)

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        self._callbacks.append(callback)
