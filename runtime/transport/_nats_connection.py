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
"""

from __future__ import annotations

import logging
import time

import anyio

from ..errors import TransportError
from ..wire import WIRE_MAX_PAYLOAD
from ._gone import Gone
from ._nats_edge import AttemptFailed, mapped
from ._nats_hooks import NatsHooks
from ._natspy import Client
from ._natspy import errors as nats_errors

# The transport logs under one name, ``_nats``'s, whichever module of it speaks.
log = logging.getLogger("runtime.transport._nats")

_CLOSE_TIMEOUT = 2.0
_KEEPER_PERIOD = 1.0
"""How often the keeper looks whether nats-py's reconnecting still makes progress."""


class NatsConnection(NatsHooks):
    """Our connect loop, and the keeper that replaces a client nats-py gave
    up on (see the module's docstring)."""

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

    async def _discard(self, client: Client) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            try:
                await client.close()
            except Exception as exc:  # a half-set-up client; nothing left to save
                log.debug("closing NATS client failed: %r", exc)

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
