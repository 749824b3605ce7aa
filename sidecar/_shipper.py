"""The events shipper: the outbox to the hub, in order, until acknowledged.

Only while a session is established: events are stamped with its id and
owner epoch. A batch is resent until an EventsAck names its events; the hub
ingests by event id, so a resend after a lost ack (or a crash) is harmless.
"""

from __future__ import annotations

import logging

import msgspec

from runtime import (
    Backoff,
    Event,
    EventsAck,
    FrameDecoder,
    Refused,
    RunEvents,
    Wakeup,
    afailpoint,
    next_attempt,
)

from ._errors import HubUnavailable
from ._inbox import Inbox
from ._link import HubLink

log = logging.getLogger("mailrun.sidecar.shipper")

MAX_BATCH_BYTES = 512 * 1024
"""Keep a RunEvents frame well under NATS' default 1 MiB max payload."""


class Shipper:
    def __init__(
        self,
        *,
        inbox: Inbox,
        link: HubLink,
        batch_limit: int = 256,
        timeout: float = 2.0,
        session_wait: float = 1.0,
        backoff: Backoff = Backoff(),
    ) -> None:
        self._inbox = inbox
        self._link = link
        self._batch_limit = batch_limit
        self._timeout = timeout
        self._session_wait = session_wait
        self._backoff = backoff
        self._wake = Wakeup()
        self._events: msgspec.msgpack.Decoder[Event] = msgspec.msgpack.Decoder(Event)
        self._replies: FrameDecoder[EventsAck | Refused] = FrameDecoder(EventsAck | Refused)

    def wake(self) -> None:
        """New events were committed."""
        self._wake.set()

    async def run(self) -> None:
        failures = 0
        while True:
            session = self._link.session
            if session is None:
                await self._link.wait_session(self._session_wait)
                continue
            # Cleared before reading: a commit after the read wakes us.
            self._wake.clear()
            events = self._cut(await self._inbox.unacked(self._batch_limit))
            if not events:
                await self._wake.wait()
                continue
            frame = RunEvents(
                deployment_id=self._link.identity.deployment_id,
                session_id=session.session_id,
                owner_epoch=session.owner_epoch,
                events=events,
            )
            await afailpoint("sidecar.shipper.before_send")
            try:
                reply = await self._link.request(
                    self._link.subjects.events, frame, self._replies, self._timeout
                )
            except HubUnavailable as exc:
                # Said once per outage, however long: the rest at DEBUG.
                level = logging.DEBUG if failures else logging.INFO
                log.log(level, "events not acknowledged (%s); saying hello and resending", exc)
                self._link.rehello()
                reply = None
            if isinstance(reply, EventsAck) and reply.ids:
                # The hub has them; a crash here resends them (they dedupe there).
                await afailpoint("sidecar.shipper.after_ack")
                await self._inbox.mark_acked(reply.ids)
                if failures:
                    log.info("events acknowledged again after %d failed attempt(s)", failures)
                failures = 0
                continue
            if isinstance(reply, Refused):
                log.log(
                    logging.DEBUG if failures else logging.WARNING,
                    "hub refused %d event(s): %s %s",
                    len(events),
                    reply.reason,
                    reply.detail,
                )
            failures = next_attempt(failures)
            # A new session (the hub is back, or we are welcome again) ends the
            # wait: the events go out at once.
            await self._link.wait_new_session(session, self._backoff.delay(failures))

    def _cut(self, frames: list[bytes]) -> list[Event]:
        """Decode a prefix of ``frames`` that fits one RunEvents frame (at least one)."""
        events: list[Event] = []
        size = 0
        for data in frames:
            size += len(data)
            if events and size > MAX_BATCH_BYTES:
                break
            events.append(self._events.decode(data))
        return events
