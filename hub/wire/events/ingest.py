"""Applying one RunEvents frame's events, in the frame's write transaction.

See :mod:`hub.wire.events.events` for the rules; :mod:`hub.wire.events.routing` turns the
mail the events send into triggers or outgoing mail. The statements are the
store's (``event_run``, ``record_event``, ``finish_run``...).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import groupby
from typing import Any, cast

import msgspec

from runtime import (
    ApprovalRequested,
    ChildRunStarted,
    DispatchProcessed,
    EnvelopeQuarantined,
    Event,
    MailSent,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunStatus,
    encode,
    is_terminal,
    tracing,
)
from runtime.config import DEFAULT_RUN_HISTORY
from runtime.wire import TIMER_KIND, RunSuspended, TimerCancelled, TimerSet

from ...store import (
    Accepted,
    DeadLetter,
    EventRun,
    OutboundStatus,
    Trigger,
    Tx,
    accept_triggers,
    ask_approval,
    cancel_timer,
    event_run,
    finish_run,
    name_child_entrypoint,
    record_event,
    resume_if_outdated,
    set_timer,
    start_run,
    suspend_run,
)
from ..retention import DeadLetters
from .processed import ProcessedBatch
from .quarantine import ingest_quarantined
from .routing import child_item, route_mail, start_item

log = logging.getLogger("mailrun.hub.events")

_EFFECTS = (MailSent, ChildRunStarted, ApprovalRequested, TimerSet, TimerCancelled)
"""Events that act beyond their run: mail, a child, an approval, a timer."""


class Ingest:
    """One frame's events inside one write transaction."""

    def __init__(
        self,
        tx: Tx,
        deployment_id: str,
        subject: str,
        now: float,
        letters: DeadLetters,
        history: int = DEFAULT_RUN_HISTORY,
    ) -> None:
        self.tx = tx
        self.history = history
        self.deployment_id = deployment_id
        self.subject = subject
        self.now = now
        self.letters = letters
        self.mail: list[MailSent] = []
        self.items: list[Trigger] = []
        """``start`` and ``child`` items, accepted after the frame's events."""
        self.due: set[str] = set()
        """Runs whose history is trimmed in this transaction: those that got
        an event other than a DispatchProcessed that moved its run's step,
        or whose step passed a multiple of ``trim_every`` (``processed.py``)."""
        self.settled_after: list[float] = []
        """Seconds from acceptance of each dispatch the frame settled (metrics)."""
        self.outbound = 0
        """Outgoing mails recorded for the relay."""
        self.resumed = False
        """A suspended run was resumed at once: its resume item waits for the dispatcher."""
        self.timers_set = False
        """A timer (or an approval's expiry) was set: the timer loop looks again."""

    def events(self, events: Sequence[Event]) -> bool:
        """Record and apply each new event in order; True when one freed a
        claim-checked body. Consecutive DispatchProcessed events go as one
        batch (:mod:`hub.wire.events.processed`), with the same outcome."""
        released = False
        for processed, group in groupby(events, key=lambda e: isinstance(e, DispatchProcessed)):
            if processed:
                batch = ProcessedBatch(
                    self.tx, self.deployment_id, self.now, self._dead_letter, keep=self.history
                )
                released |= batch.apply(cast(list[DispatchProcessed], list(group)))
                self.due |= batch.due
                self.settled_after += batch.settled_after
            else:
                for event in group:
                    released |= self.event(event)
        return released

    def event(self, event: Event) -> bool:
        """Record and apply ``event`` (any but a DispatchProcessed) if new;
        True when it freed a claim-checked body."""
        if isinstance(event, EnvelopeQuarantined):
            # Found by its dispatch: the sidecar may not have read the run id.
            return ingest_quarantined(
                self.tx, self.deployment_id, self.subject, event, self.now, self.letters
            )
        run = event_run(self.tx, event.run_id, self.deployment_id)
        if run is None:
            self._dead_letter(event, "foreign_run")
            return False
        kind, at = type(event).__name__, event.at or self.now
        if not record_event(
            self.tx, event.event_id, event.run_id, self.deployment_id, kind, encode(event), at
        ):
            return False
        self.due.add(event.run_id)
        if isinstance(event, _EFFECTS) and is_terminal(run.status):
            # The hub ended the run first (a terminate, a delete): what the
            # sidecar committed before it heard of that takes no effect.
            log.info("%s of ended run %s not applied", kind, event.run_id)
            return False
        if isinstance(event, RunStarted):
            start_run(self.tx, event.run_id, self.now)
        elif isinstance(event, RunCompleted):
            self._finish(run, event.run_id, RunStatus.COMPLETED, result=event.result)
        elif isinstance(event, RunFailed):
            self._finish(run, event.run_id, RunStatus.FAILED, error=event.error)
        elif isinstance(event, RunCancelled):
            self._finish(run, event.run_id, RunStatus.CANCELLED, error=event.reason)
        elif isinstance(event, RunSuspended):
            error = event.error or None
            if suspend_run(self.tx, event.run_id, event.dispatch_id, error, at, self.now):
                # Failed under a version an activation has replaced since.
                self.resumed |= resume_if_outdated(self.tx, event.run_id) is not None
        elif isinstance(event, ChildRunStarted):
            self._child_started(event)
        elif isinstance(event, ApprovalRequested):
            # With expires_at, its expiry is a timer of the run (the event's id).
            self.timers_set |= ask_approval(
                self.tx, event.approval_id, event.run_id, event.prompt, self.now,
                deployment_id=self.deployment_id, expires_at=event.expires_at,
                expiry_id=event.event_id,
            )  # fmt: skip
        elif isinstance(event, TimerSet):
            self._set_timer(event)
        elif isinstance(event, TimerCancelled):
            cancel_timer(self.tx, event.run_id, event.name)
        elif isinstance(event, MailSent):
            self.mail.append(event)
        return False

    def route(self, outbound: OutboundStatus) -> set[str]:
        """Accept the frame's new items and mail in this transaction; return the
        deployments that got dispatches (``outbound``: the first status of mail
        to an address no deployment holds)."""
        woken = self._route_items()
        if self.resumed:
            woken.add(self.deployment_id)
        return woken | self._route_mail(outbound)

    def _route_items(self) -> set[str]:
        if not self.items:
            return set()
        outcomes, woken = accept_triggers(self.tx, self.items)
        for trigger, outcome in zip(self.items, outcomes, strict=True):
            if not isinstance(outcome, Accepted):
                # A parent that ended takes no more child items (its children
                # are cancelled with it): expected, so not a warning.
                log.info(
                    "%s item for run %s not delivered: %s", trigger.kind, trigger.run_id, outcome
                )
        return woken

    def _route_mail(self, outbound: OutboundStatus) -> set[str]:
        woken, self.outbound = route_mail(
            self.tx, self.deployment_id, self.mail, outbound, self._dead_letter
        )
        return woken

    def _set_timer(self, event: TimerSet) -> None:
        """The run's timer, set or moved: the event's id is the new item's. It
        is stamped with the time of the call that set it, so timers due at the
        same time fire in the order the run set them."""
        payload = None if event.payload is None else msgspec.json.encode(event.payload)
        set_timer(
            self.tx, timer_id=event.event_id, deployment_id=self.deployment_id,
            run_id=event.run_id, kind=TIMER_KIND, name=event.name, due_at=event.due_at,
            payload=payload, now=event.at or self.now,
        )  # fmt: skip
        self.timers_set = True

    def _child_started(self, event: ChildRunStarted) -> None:
        """The child minted for this spawn gets its entrypoint and its ``start``
        item: sent by the parent, its subject the entrypoint, its body the input."""
        if not name_child_entrypoint(
            self.tx, event.child_run_id, event.run_id, self.deployment_id, event.entrypoint
        ):
            self._dead_letter(event, "unknown_child")
            return
        if tracing.on:
            tracing.spans.keep_child(event.trace, event.child_run_id)
        self.items.append(start_item(self.deployment_id, event))

    def _finish(
        self,
        run: EventRun,
        run_id: str,
        status: RunStatus,
        *,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        text = msgspec.json.encode(result).decode() if result is not None else None
        finished = finish_run(self.tx, run_id, status, text, error or None, self.now)
        parent = run.parent_run_id
        if finished and parent:
            self.items.append(child_item(self.deployment_id, parent, run_id, status, result, error))

    def _dead_letter(self, event: Event, reason: str) -> None:
        log.warning(
            "event %s of %s for run %s: %s",
            event.event_id,
            self.deployment_id,
            event.run_id,
            reason,
        )
        if self.letters.admit("events", self.deployment_id):
            letter = DeadLetter(
                "events",
                self.subject,
                f"{reason}: {self.deployment_id}",
                encode(event),
                self.deployment_id,
                self.now,
            )
            self.letters.keep(self.tx, letter)
