"""The NATS transport's connection: the first connect is our own loop
(backoff with jitter, cancellable), because the server may start after us.
Once connected, nats-py reconnects by itself and replays every
subscription; we pace its attempts with our backoff (``_nats_hooks``) and
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

The connection works on the transport's state (``_nats_hooks``'s
:class:`Current`) and speaks through its hooks: both passed in by the
transport that owns it.
"""

from __future__ import annotations

import logging
import time

import anyio

from ..errors import TransportError
from ..loops import Backoff, Retry
from ..wire import WIRE_MAX_PAYLOAD
from ._gone import Gone
from ._nats_edge import AttemptFailed, mapped
from ._nats_hooks import Current, Endpoint, NatsHooks
from ._natspy import Client
from ._natspy import errors as nats_errors

# The transport logs under one name, ``_nats``'s, whichever module of it speaks.
log = logging.getLogger("runtime.transport._nats")

_CLOSE_TIMEOUT = 2.0
_KEEPER_PERIOD = 1.0
"""How often the keeper looks whether nats-py's reconnecting still makes progress."""
_FLUSH_AFTER_RECONNECT = 10.0
"""How long nats-py's reconnect waits for its first PONG (its flush default)."""


class NatsConnection:
    """Our connect loop, and the keeper that replaces a client nats-py gave
    up on (see the module's docstring)."""

    def __init__(
        self,
        endpoint: Endpoint,
        current: Current,
        hooks: NatsHooks,
        retry: Retry,
        backoff: Backoff,
        stall_after: float | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._current = current
        self._hooks = hooks
        self._retry = retry  # connect attempts since the connection was last up
        # An attempt of nats-py's takes at most its delay, a TCP connect, the
        # INFO and PONG waits and the flush after it; silence past that (and
        # some slack) means its reconnect task ended without reconnecting.
        longest = backoff.maximum + 4 * endpoint.connect_timeout + _FLUSH_AFTER_RECONNECT
        self.stall_after = longest + 5.0 if stall_after is None else stall_after

    async def connect(self) -> None:
        """Connect, retrying until the server answers; cancel to give up."""
        endpoint, current, hooks = self._endpoint, self._current, self._hooks
        with hooks.attempting():
            while True:
                client, gone = Client(), Gone()
                try:
                    await client.connect(**hooks.options(client, gone))
                except (AttemptFailed, nats_errors.Error, OSError, TimeoutError) as exc:
                    cause = exc.__cause__ if isinstance(exc, AttemptFailed) else exc
                    if not (isinstance(cause, Exception) and hooks.refusal(cause)):
                        log.debug(
                            "connect to %s failed (attempt %d): %r",
                            endpoint.shown_url,
                            self._retry.failures + 1,
                            cause,
                        )
                except BaseException:
                    await discard(client)
                    raise
                else:
                    current.client, current.gone = client, gone
                    hooks.connected()
                    log.info("connected to NATS at %s as %s", endpoint.shown_url, endpoint.name)
                    if client.max_payload < WIRE_MAX_PAYLOAD:
                        log.warning(
                            "NATS at %s takes messages of at most %d bytes; mailrun's frames"
                            " need %d (the server's default max_payload)",
                            endpoint.shown_url,
                            client.max_payload,
                            WIRE_MAX_PAYLOAD,
                        )
                    return
                await discard(client)
                self._retry.failed()
                await self._retry.wait()

    async def keep(self) -> None:
        """Replace a client nats-py has given up on; runs until cancelled."""
        current, hooks = self._current, self._hooks
        while not current.closed:
            await hooks.lost.wait(_KEEPER_PERIOD)
            client = current.client
            stalled = (
                not client.is_connected and time.monotonic() - hooks.last_try > self.stall_after
            )
            if current.closed or not (client.is_closed or stalled):
                continue
            if stalled and not client.is_closed:
                log.warning(
                    "NATS at %s: no reconnect attempt for %.0f s; connecting again",
                    self._endpoint.shown_url,
                    self.stall_after,
                )
            await self._replace(client)

    async def _replace(self, old: Client) -> None:
        current = self._current
        subs = list(current.subs.values())  # subscribed from now on: on the new client
        current.up.clear()
        current.gone.set()  # its requests go to the new client, even if nats-py never said closed
        current.replacing = True
        try:
            await discard(old)
            await self.connect()
        finally:
            current.replacing = False
        for sub in subs:
            if sub.closed:
                continue
            try:
                with mapped("subscribe to", current, sub.subject):
                    await sub.renew(current.client)
            except TransportError as exc:
                # Lost again already: the next replacement tries again.
                log.warning("subscribing again to %s failed: %s", sub.subject, exc)
        await self._hooks.on_reconnected()


async def discard(client: Client) -> None:
    """Close ``client`` within :data:`_CLOSE_TIMEOUT`, whatever state it is in."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
        try:
            await client.close()
        except Exception as exc:  # a half-set-up client; nothing left to save
            log.debug("closing NATS client failed: %r", exc)
