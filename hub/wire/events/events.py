"""Run event ingestion (``hub.events``): the hub's copy of what sidecars did.

A RunEvents frame is ingested in ONE write transaction (shared with the
frames of other sidecars that wait at the same moment, each in a savepoint
of its own: :mod:`hub.wire.events.grouped`). ``run_event.id`` is
the sidecar-minted event id, so a resent frame inserts nothing and applies
nothing; only events inserted now are applied. A DispatchProcessed moves the
run's state only forward in the run's processing order (its ``step``; seq
for an older sidecar's, which has no approval gates); a terminal status is
set only on a run that is not terminal yet, and so is ``suspended`` (a
RunSuspended: its failing dispatch and error kept on the run until it is
resumed, ``hub.store.resume_run``). An ApprovalRequested makes a
live run ``waiting`` (one with ``expires_at`` also sets the approval's
expiry, a timer of the run); applying the decision of its last pending
approval makes it ``running`` again. A TimerSet sets (or moves) the run's
timer, a TimerCancelled drops it; the timer loop is woken after the commit.
A ChildRunStarted gives the child its ``start`` item (the spawn's input);
a child run that ends gives its live parent a ``child`` item. Both are
triggers accepted in the same transaction, with message ids derived from
the child's id, so a resent event adds nothing.
The delivered marks of acks held for it (``hub.wire.delivery.marks``) under
the same fence are written first, in the same transaction.
Events naming a run outside the sender's deployment are acknowledged (so the
sidecar's outbox moves on) but kept as dead letters, never applied. Each
run's history is trimmed in the same transaction (:mod:`hub.wire.retention`)
once a quarter of it has come since the last trim (``processed.trim_every``).
The statements are the store's; the rules are this module's and
:mod:`hub.wire.events.ingest`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from runtime import EventsAck, FrameDecoder, Refused, RunEvents, afailpoint, tracing
from runtime.config import DEFAULT_RUN_HISTORY
from runtime.failpoints import failpoint

from ...metrics import HubMetrics
from ...store import (
    OutboundStatus,
    Store,
    Tx,
    check_fence,
    floor_seq,
    mark_delivered,
    trim_history,
)
from ..delivery import Marks
from ..retention import DeadLetters
from ..sessions import SessionTable
from .grouped import GroupCommit
from .ingest import Ingest

log = logging.getLogger("mailrun.hub.events")


class OutboundSink(Protocol):
    """Where mail to outside addresses goes (``hub.outbound.Outbox``)."""

    @property
    def status(self) -> OutboundStatus:
        """What a new row starts as: pending with a relay, no_relay without."""
        ...

    def wake(self) -> None:
        """New rows were committed."""


class EventsHandler:
    """Answers ``hub.events`` with EventsAck (every id of the frame) or Refused."""

    def __init__(
        self,
        *,
        store: Store,
        sessions: SessionTable,
        subject: str,
        on_released: Callable[[], None],
        on_accepted: Callable[[set[str]], None],
        letters: DeadLetters | None = None,
        history: int = DEFAULT_RUN_HISTORY,
        outbox: OutboundSink | None = None,
        metrics: HubMetrics | None = None,
        on_timers: Callable[[], None] | None = None,
        marks: Marks | None = None,
        group: GroupCommit | None = None,
    ) -> None:
        self._store = store
        self._marks = marks
        # Frames of several sidecars in one commit (its run in the wire's task group).
        self._transact = group.transact if group is not None else store.transact
        self._on_timers = on_timers
        self._outbox = outbox
        self._metrics = metrics
        self._letters = letters or DeadLetters()
        self._history = history
        self._subject = subject
        self._on_accepted = on_accepted
        self._sessions = sessions
        self._on_released = on_released
        self._decoder: FrameDecoder[RunEvents] = FrameDecoder(RunEvents)

    async def __call__(self, data: bytes, sender: str | None) -> EventsAck | Refused:
        frame = self._decoder.decode(data)
        session = self._sessions.check(
            frame.session_id, frame.deployment_id, frame.owner_epoch, sender=sender
        )
        status = self._outbox.status if self._outbox else OutboundStatus.NO_RELAY

        fence = self._sessions.fence(session.deployment_id, frame.owner_epoch)
        # The acks held under this very fence: written here, fenced once.
        marks = self._marks
        held = marks.take(fence) if marks is not None else []

        def body(tx: Tx) -> tuple[Ingest, bool, set[str], int]:
            check_fence(tx, fence)
            for mark in held:
                mark_delivered(tx, mark.acked, mark.at)
            ingest = Ingest(
                tx,
                session.deployment_id,
                self._subject,
                time.time(),
                self._letters,
                self._history,
            )
            released = ingest.events(frame.events)
            woken = ingest.route(status)
            trim_history(tx, ingest.due, self._history)
            floor = floor_seq(tx, session.deployment_id)
            failpoint("hub.events.before_commit")
            return ingest, released, woken, floor

        with (
            tracing.spans.ingesting(self._subject, session.deployment_id, frame.events)
            if tracing.on
            else tracing.OFF
        ):
            try:
                ingest, released, woken, floor = await self._transact(body)
            except BaseException:
                if marks is not None:
                    marks.give_back(held)
                raise
        if marks is not None:
            marks.written(held)
        # Ingested, not acknowledged: the sidecar will resend these events.
        await afailpoint("hub.events.after_commit")
        if self._metrics is not None and ingest.settled_after:
            self._metrics.processed.inc(session.deployment_id, len(ingest.settled_after))
            for seconds in ingest.settled_after:
                self._metrics.end_to_end_seconds.observe(seconds)
        if released:
            self._on_released()
        if woken:
            self._on_accepted(woken)
        if ingest.outbound and self._outbox is not None:
            self._outbox.wake()
        if ingest.timers_set and self._on_timers is not None:
            self._on_timers()
        return EventsAck(ids=[e.event_id for e in frame.events], floor_seq=floor)
