"""The NATS transport: nats-py behind the :class:`~runtime.Transport` seam.

The first connect is our own loop (backoff with jitter, cancellable), because
the server may start after us. Once connected, nats-py reconnects by itself
and replays every subscription; we only pace its attempts with jitter and tell
``on_reconnect`` callbacks when it is back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
from nats import errors as nats_errors
from nats.aio.client import Client, Server
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSub

from ._backoff import Backoff
from ._config import redact_url
from ._errors import NoResponders, RequestTimeout, TransportClosed, TransportError
from ._limits import WIRE_MAX_PAYLOAD
from ._transport import Message, ReconnectCallback, Transport
from ._wakeup import Flag

log = logging.getLogger(__name__)

_RETRY = Backoff(initial=0.05, maximum=1.0)
"""Paces the first connect and nats-py's reconnects alike."""
_CLOSE_TIMEOUT = 2.0


def _pick_server(servers: list[Server], _info: dict[str, Any]) -> tuple[Server | None, float]:
    # nats-py has no jitter option; its reconnect hook lets us add one (and
    # prefer the server that failed least when a cluster is known).
    server = min(servers, key=lambda s: s.reconnects)
    return server, _RETRY.delay(server.reconnects + 1)


def _check_url(url: str) -> None:
    # Checked once up front: the connect loop would otherwise retry a typo forever.
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise TransportError(f"invalid NATS URL {redact_url(url)!r}: {exc}") from exc
    if parts.scheme not in ("nats", "tls", "ws", "wss") or not parts.hostname:
        raise TransportError(f"invalid NATS URL {redact_url(url)!r}: expected nats://host:port")


def _is_auth_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return isinstance(exc, nats_errors.AuthorizationError) or "authorization violation" in text


class _AttemptFailed(Exception):
    """Ends one nats-py connect attempt so that our loop owns the retry."""


@contextmanager
def _mapped(what: str) -> Iterator[None]:
    """Turn nats-py and socket errors into the runtime's transport errors."""
    try:
        yield
    except nats_errors.NoRespondersError as exc:
        raise NoResponders(f"{what}: no responders") from exc
    except nats_errors.ConnectionClosedError as exc:
        raise TransportClosed(f"{what}: connection closed") from exc
    except TimeoutError as exc:  # nats-py's TimeoutError is a builtin TimeoutError
        raise RequestTimeout(f"{what}: timed out") from exc
    except (nats_errors.Error, OSError) as exc:
        raise TransportError(f"{what}: {exc}") from exc


class NatsMessage:
    """A received NATS message; ``respond`` publishes on its reply subject."""

    __slots__ = ("_msg", "_transport")

    def __init__(self, transport: NatsTransport, msg: Msg) -> None:
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
    """One nats-py subscription read through its message iterator."""

    def __init__(self, transport: NatsTransport, sub: NatsSub) -> None:
        self._transport = transport
        self._sub = sub
        self._closed = False
        self.dropped = 0
        """Messages the client discarded because this consumer fell behind."""

    @property
    def subject(self) -> str:
        return self._sub.subject

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        # nats-py ends its iterator when the subscription or connection closes.
        msg = await self._sub.messages.__anext__()
        return NatsMessage(self._transport, msg)

    async def unsubscribe(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._transport._forget(self._sub)
        try:
            await self._sub.unsubscribe()
        except (nats_errors.ConnectionClosedError, nats_errors.BadSubscriptionError):
            pass  # already gone with its connection
        except (nats_errors.Error, OSError) as exc:
            log.debug("unsubscribe from %s failed: %r", self.subject, exc)


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
    ) -> None:
        self.url = url
        self.shown_url = redact_url(url)
        """The URL as logs may show it: without credentials."""
        self.name = name
        self._connect_timeout = connect_timeout
        self._seed = seed
        self._inbox_prefix = inbox_prefix
        self._refused = False  # the server refused our credentials since the last connect
        self._nc = Client()
        self._connecting_task: int | None = None
        self._closed = False
        self._callbacks: list[ReconnectCallback] = []
        self._subs: dict[NatsSub, NatsSubscription] = {}
        self._up = Flag()  # set while connected

    @property
    def is_connected(self) -> bool:
        return not self._closed and self._nc.is_connected

    async def connect(self) -> None:
        """Connect, retrying until the server answers; cancel to give up."""
        attempt = 0
        self._connecting_task = anyio.get_current_task().id
        try:
            while True:
                client = Client()
                try:
                    await client.connect(**self._options())
                except (_AttemptFailed, nats_errors.Error, OSError, TimeoutError) as exc:
                    cause = exc.__cause__ if isinstance(exc, _AttemptFailed) else exc
                    if not (isinstance(cause, Exception) and self._refusal(cause)):
                        log.debug(
                            "connect to %s failed (attempt %d): %r",
                            self.shown_url,
                            attempt + 1,
                            cause,
                        )
                except BaseException:
                    await self._discard(client)
                    raise
                else:
                    self._nc = client
                    self._refused = False
                    self._up.set()
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
                attempt += 1
                await anyio.sleep(_RETRY.delay(attempt))
        finally:
            self._connecting_task = None

    def _options(self) -> dict[str, Any]:
        # Passed as a dict because nats-py annotates its second counts as int.
        options: dict[str, Any] = {
            "servers": self.url,
            "name": self.name,
            "connect_timeout": self._connect_timeout,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.2,
            "reconnect_to_server_handler": _pick_server,
            "ping_interval": 2,
            "max_outstanding_pings": 2,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
            "closed_cb": self._on_closed,
        }
        if self._seed is not None:
            # nats-py signs the server's nonce with it; a server without
            # nkey users sends no nonce and ignores the key.
            options["nkeys_seed_str"] = self._seed
        if self._inbox_prefix is not None:
            options["inbox_prefix"] = self._inbox_prefix
        return options

    async def _discard(self, client: Client) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            try:
                await client.close()
            except Exception as exc:  # a half-set-up client; nothing left to save
                log.debug("closing NATS client failed: %r", exc)

    async def _on_error(self, exc: Exception) -> None:
        if self._connecting_task == anyio.get_current_task().id:
            # Called from inside our connect attempt: end it here, or nats-py
            # would keep retrying at its own fixed pace.
            raise _AttemptFailed from exc
        if isinstance(exc, nats_errors.SlowConsumerError):
            sub = self._subs.get(exc.sub)
            if sub is not None:
                sub.dropped += 1
                if sub.dropped & (sub.dropped - 1) == 0:  # 1, 2, 4, ...: log, don't flood
                    log.warning("slow consumer on %s: %d dropped", exc.subject, sub.dropped)
        elif isinstance(exc, OSError | nats_errors.StaleConnectionError):
            log.debug("NATS connection error: %r", exc)
        elif self._refusal(exc):
            pass
        else:
            log.warning("NATS error: %r", exc)

    def _refusal(self, exc: Exception) -> bool:
        """Log a refusal of our credentials (once until the next connect); False
        for any other error."""
        if not _is_auth_error(exc):
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
        if not self._closed:
            log.info("disconnected from NATS at %s; reconnecting", self.shown_url)

    async def _on_closed(self) -> None:
        log.debug("NATS connection to %s closed", self.shown_url)

    async def _on_reconnected(self) -> None:
        # Runs on nats-py's reconnect task after the subscriptions were replayed.
        log.info("reconnected to NATS at %s", self.shown_url)
        self._refused = False
        self._up.set()
        for callback in list(self._callbacks):
            try:
                await callback()
            except Exception:
                log.exception("reconnect callback %r failed", callback)

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        self._callbacks.append(callback)

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosed(f"transport {self.name!r} is closed")

    async def publish(self, subject: str, data: bytes) -> None:
        self._check_open()
        with _mapped(f"publish to {subject}"):
            await self._nc.publish(subject, data)

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        self._check_open()
        with _mapped(f"request to {subject}"):
            msg = await self._nc.request(subject, data, timeout=timeout)
        return msg.data

    async def subscribe(
        self, subject: str, *, queue: str | None = None, max_pending: int = 4096
    ) -> NatsSubscription:
        self._check_open()
        with _mapped(f"subscribe to {subject}"):
            sub = await self._nc.subscribe(
                subject, queue=queue or "", pending_msgs_limit=max_pending
            )
        wrapper = NatsSubscription(self, sub)
        self._subs[sub] = wrapper
        return wrapper

    def _forget(self, sub: NatsSub) -> None:
        self._subs.pop(sub, None)

    async def flush(self, timeout: float = 2.0) -> None:
        """Wait until the server has everything published so far (reconnecting first)."""
        self._check_open()
        with _mapped("flush"), anyio.fail_after(timeout):
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
        self._subs.clear()


@asynccontextmanager
async def open_nats(
    url: str,
    *,
    name: str,
    connect_timeout: float = 2.0,
    seed: str | None = None,
    inbox_prefix: str | None = None,
) -> AsyncIterator[Transport]:
    """Connect to NATS at ``url`` (waiting for the server as long as it takes).

    ``seed`` is the connection's nkey seed (its NATS identity; without one it
    connects anonymously or with the URL's user and password).
    ``inbox_prefix`` replaces ``_INBOX`` in the reply subjects of its
    requests (a sidecar's identity may subscribe only below its own).
    Cancel the surrounding scope to give up waiting: a server that refuses
    the credentials is retried like one that is down, since a config reload
    may admit them. Leaving the block closes the connection within a couple
    of seconds, whether or not the server is up.
    """
    _check_url(url)
    transport = NatsTransport(
        url, name=name, connect_timeout=connect_timeout, seed=seed, inbox_prefix=inbox_prefix
    )
    await transport.connect()
    try:
        yield transport
    finally:
        await transport.aclose()
