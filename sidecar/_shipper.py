"""The events shipper: the outbox to the hub, in order, until acknowledged.

Only while a session is established: events are stamped with its id and
owner epoch. A batch is resent until an EventsAck names its events; the hub
ingests by event id, so a resend after a lost ack (or a crash) is harmless.

A frame is packed by encoded size, to at most ``MAX_FRAME_BYTES`` (and at
least one event), so it always fits a NATS message: the size limits checked
at commit keep every event under ``MAX_EVENT``. An event that alone could
not fit (none this release commits) is set aside as a dead letter, loudly,
never resent forever. A failed request is resent with backoff; only the
hub's session refusals (``unknown_session``, ``stale_epoch``) make the link
say hello again, never a timeout: a hello cannot make a frame arrive.
"""

from __future__ import annotations

import logging

import msgspec

from runtime import (
    MAX_FRAME_BYTES,
    WIRE_MAX_PAYLOAD,
    Backoff,
    Event,
    EventsAck,
    FrameDecoder,
    Refused,
    RunEvents,
    Wakeup,
    afailpoint,
    encode,
    next_attempt,
)

from ._errors import HubUnavailable
from ._inbox import Inbox
from ._link import HubLink

log = logging.getLogger("mailrun.sidecar.shipper")

_ARRAY_HEADER = 5  # msgpack's largest array header: the frame's list of events grows by it


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
            frame = RunEvents(
                deployment_id=self._link.identity.deployment_id,
                session_id=session.session_id,
                owner_epoch=session.owner_epoch,
                events=[],
            )
            frame.events = await self._pack(frame)
            if not frame.events:
                await self._wake.wait()
                continue
            await afailpoint("sidecar.shipper.before_send")
            try:
                reply = await self._link.request(
                    self._link.subjects.events, frame, self._replies, self._timeout
                )
            except HubUnavailable as exc:
                # Said once per outage, however long: the rest at DEBUG.
                level = logging.DEBUG if failures else logging.INFO
                log.log(level, "events not acknowledged (%s); resending", exc)
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
                    len(frame.events),
                    reply.reason,
                    reply.detail,
                )
            failures = next_attempt(failures)
            # A new session (the hub is back, or we are welcome again) ends the
            # wait: the events go out at once.
            await self._link.wait_new_session(session, self._backoff.delay(failures))

    async def _pack(self, frame: RunEvents) -> list[Event]:
        """The outbox's oldest events that fit ``frame`` (at least one, if any)."""
        overhead = len(encode(frame)) + _ARRAY_HEADER
        size = overhead
        events: list[Event] = []
        for data in await self._inbox.unacked(self._batch_limit):
            if overhead + len(data) > WIRE_MAX_PAYLOAD:
                if events:
                    break  # the events before it go first, in order
                await self._set_aside(data, overhead + len(data))
                continue
            size += len(data)
            if events and size > MAX_FRAME_BYTES:
                break
            events.append(self._events.decode(data))
        return events

    async def _set_aside(self, data: bytes, size: int) -> None:
        # Resending it would fail the same way forever, and hold back every
        # later event of the deployment.
        event = self._events.decode(data)
        reason = f"unshippable: a frame of {size} bytes, over NATS' {WIRE_MAX_PAYLOAD}"
        log.error(
            "%s %s of run %s cannot be shipped (%s); set aside as a dead letter",
            type(event).__name__,
            event.event_id,
            event.run_id,
            reason,
        )
        await self._inbox.set_aside(event.event_id, reason)
