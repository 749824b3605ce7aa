"""The events shipper: the outbox to the hub, in order, until acknowledged.

Only while a session is established: events are stamped with its id and
owner epoch. A batch is resent until an EventsAck names its events; the hub
ingests by event id, so a resend after a lost ack (or a crash) is harmless.
One frame is in flight at a time, so the hub applies them in outbox order;
an acknowledged frame's mark (the outbox rows leave) is held for the
inbox's next transaction, and the next frame's round trip starts after the
acknowledged one's outbox position instead of waiting for that mark to say
what is left.
While a full frame is out, the next one is read (it is full too: there is
a backlog), so that it goes as soon as the ack comes; after a frame that
was not full, the outbox is read again once something was committed since
that frame was read (at once, if it was while the frame was out).

The events go as the outbox keeps them, encoded when they were made
(``msgspec.Raw`` in the frame): nothing is decoded and encoded again on
the way. A frame is packed by encoded size, to at most ``MAX_FRAME_BYTES``
(and at least one event), so it always fits a NATS message: the size limits checked
at commit keep every event under ``MAX_EVENT``. An event that alone could
not fit (none this release commits) is set aside as a dead letter, loudly,
never resent forever. A failed request is resent with backoff; only the
hub's session refusals (``unknown_session``, ``stale_epoch``) make the link
say hello again, never a timeout: a hello cannot make a frame arrive.

An EventsAck also says up to which seq the hub has settled everything
(``floor_seq``); one above the inbox's position goes to ``on_floor``, which
raises it (the app: ``Inbox.raise_floor``, then the runs look again).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import msgspec

from runtime import (
    MAX_FRAME_BYTES,
    WIRE_MAX_PAYLOAD,
    Backoff,
    EventsAck,
    FrameDecoder,
    Refused,
    Retry,
    RunEvents,
    Wakeup,
    afailpoint,
    encode,
)
from runtime.wire import FORMAT_VERSION

from .._errors import HubUnavailable
from ..storage import Inbox, Outgoing
from ._session import HubLink

log = logging.getLogger("mailrun.sidecar.shipper")

_ARRAY_HEADER = 5  # msgpack's largest array header: the frame's list of events grows by it

MARK_WAIT = 0.5
"""Seconds an acknowledgement waits for a transaction of the inbox to write
it with its own rows (the next mail's, under any steady traffic) before it
is written alone."""


class EventsFrame(msgspec.Struct, tag=RunEvents.__name__, tag_field="t", kw_only=True):
    """``runtime.RunEvents`` as the shipper encodes it, its events encoded
    already: the same fields in the same order (tests/sidecar/storage/test_events.py
    holds the two to the same bytes)."""

    v: int = FORMAT_VERSION
    deployment_id: str = ""
    session_id: str
    owner_epoch: int
    events: list[msgspec.Raw]


@dataclass
class _Packed:
    """Events read for a frame, oldest first."""

    events: list[Outgoing]
    last: int
    """Outbox position of the last event taken or set aside (0: none was there)."""
    full: bool
    """Stopped by the frame's limits, not by the end of the outbox."""
    after: int = 0
    """The position they were read after."""


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
        on_floor: Callable[[int], Awaitable[object]] | None = None,
        mark_wait: float | None = None,
    ) -> None:
        self._inbox = inbox
        self._mark_wait = MARK_WAIT if mark_wait is None else mark_wait
        self._link = link
        self._batch_limit = batch_limit
        self._timeout = timeout
        self._session_wait = session_wait
        self._backoff = backoff
        self._on_floor = on_floor
        self._wake = Wakeup()
        self._replies: FrameDecoder[EventsAck | Refused] = FrameDecoder(EventsAck | Refused)

    def wake(self) -> None:
        """New events were committed."""
        self._wake.set()

    async def run(self) -> None:
        held = Wakeup()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._write_late, held)
            await self._ship(held)

    async def _ship(self, held: Wakeup) -> None:
        retry = Retry(self._backoff)  # requests in a row that got no EventsAck
        # The outbox position of the last event the hub has acknowledged; 0
        # after a failure, so that everything unacknowledged goes again.
        after = 0
        ahead: _Packed | None = None  # read while the frame before was out
        while True:
            session = self._link.session
            if session is None:
                await self._link.wait_session(self._session_wait)
                continue
            frame = EventsFrame(
                deployment_id=self._link.identity.deployment_id,
                session_id=session.session_id,
                owner_epoch=session.owner_epoch,
                events=[],
            )
            if ahead is not None and ahead.full and ahead.after == after:
                packed, ahead = ahead, None
            else:
                # Cleared before reading: a commit after the read wakes us.
                self._wake.clear()
                packed = await self._pack(frame, after)
            frame.events, last = [msgspec.Raw(e.frame) for e in packed.events], packed.last
            if not frame.events:
                if last == 0:  # else only events set aside: read on
                    await self._wake.wait()
                continue
            await afailpoint("sidecar.shipper.before_send")
            reply, ahead = await self._send(frame, packed, retry.failures)
            if isinstance(reply, EventsAck) and reply.ids:
                ids = set(reply.ids)
                named = [e for e in packed.events if e.event_id in ids]
                await self._hold(named, held)
                if reply.floor_seq > self._inbox.last_seq and self._on_floor is not None:
                    await self._on_floor(reply.floor_seq)
                after = last if len(named) == len(frame.events) else 0
                if retry.failures:
                    log.info("events acknowledged again after %d failed attempt(s)", retry.failures)
                retry.succeeded()
                if after and not packed.full:
                    # The read took all there was: only a commit since (which
                    # set the wakeup, cleared before the read) makes more. A
                    # lone mail's events need no second read that finds none.
                    await self._wake.wait()
                continue
            if isinstance(reply, Refused):
                log.log(
                    logging.DEBUG if retry.failures else logging.WARNING,
                    "hub refused %d event(s): %s %s",
                    len(frame.events),
                    reply.reason,
                    reply.detail,
                )
            after = 0
            retry.failed()
            # A new session (the hub is back, or we are welcome again) ends the
            # wait: the events go out at once.
            await retry.wait(functools.partial(self._link.wait_new_session, session))

    async def _send(
        self, frame: EventsFrame, packed: _Packed, failures: int
    ) -> tuple[EventsAck | Refused | None, _Packed | None]:
        """The request for ``frame`` (None: no answer) and, when ``frame`` is
        full, the next frame's events, read meanwhile."""
        ahead: _Packed | None = None

        # Packed for this frame's session: a new one's header may differ by a
        # few bytes, far inside the margin MAX_FRAME_BYTES leaves.
        async def read_ahead() -> None:
            nonlocal ahead
            ahead = await self._pack(frame, packed.last)

        reply: EventsAck | Refused | None = None

        async def request() -> None:
            nonlocal reply
            try:
                reply = await self._link.request(
                    self._link.subjects.events, frame, self._replies, self._timeout
                )
            except HubUnavailable as exc:
                # Said once per outage, however long: the rest at DEBUG.
                level = logging.DEBUG if failures else logging.INFO
                log.log(level, "events not acknowledged (%s); resending", exc)

        if not packed.full:
            # Nothing to read meanwhile: no task group to open and close (a
            # lone mail's frame).
            await request()
            return reply, ahead
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_ahead)
            await request()
        return reply, ahead

    async def _hold(self, events: list[Outgoing], held: Wakeup) -> None:
        """Hold the hub's acknowledgement for the inbox's next transaction
        (``sidecar/storage/_outbox.py``); what no transaction took within
        :data:`MARK_WAIT` is written in one of its own. Held here, in the
        shipper's own task: holding is a list extended, and a task of its
        own to do it was a turn of the loop and a hand-off a lone mail."""
        # The hub has them; a crash here resends them (they dedupe there).
        with self._link.activity.busy():
            await afailpoint("sidecar.shipper.after_ack")
            self._inbox.hold_acked(events)
        held.set()

    async def _write_late(self, held: Wakeup) -> None:
        while True:
            await held.wait()
            taken = self._inbox.acks_taken
            await anyio.sleep(self._mark_wait)
            # A transaction took them meanwhile: what is held now came since,
            # and gets its own wait (under steady mail, none is written alone).
            if self._inbox.acks_held and self._inbox.acks_taken == taken:
                with self._link.activity.busy():
                    await afailpoint("sidecar.shipper.before_mark")
                    await self._inbox.write_acked()

    async def _pack(self, frame: EventsFrame, after: int) -> _Packed:
        """The oldest events after outbox position ``after`` that fit
        ``frame``'s header (at least one, if any)."""
        overhead = len(encode(msgspec.structs.replace(frame, events=[]))) + _ARRAY_HEADER
        size = overhead
        events: list[Outgoing] = []
        last = 0
        rows = await self._inbox.unacked(self._batch_limit, after=after)
        for pos, event in rows:
            if overhead + len(event.frame) > WIRE_MAX_PAYLOAD:
                if events:
                    return _Packed(events, last, full=True, after=after)  # they go first
                await self._set_aside(event, overhead + len(event.frame))
                last = pos
                continue
            size += len(event.frame)
            if events and size > MAX_FRAME_BYTES:
                return _Packed(events, last, full=True, after=after)
            events.append(event)
            last = pos
        return _Packed(events, last, full=len(rows) == self._batch_limit, after=after)

    async def _set_aside(self, event: Outgoing, size: int) -> None:
        # Resending it would fail the same way forever, and hold back every
        # later event of the deployment.
        reason = f"unshippable: a frame of {size} bytes, over NATS' {WIRE_MAX_PAYLOAD}"
        log.error(
            "%s %s of run %s cannot be shipped (%s); set aside as a dead letter",
            event.kind,
            event.event_id,
            event.run_id,
            reason,
        )
        await self._inbox.set_aside(event.event_id, reason)
