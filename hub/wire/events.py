"""Run event ingestion (``hub.events``): the hub's copy of what sidecars did.

A RunEvents frame is ingested in ONE write transaction. ``run_event.id`` is
the sidecar-minted event id, so a resent frame inserts nothing and applies
nothing; only events inserted now are applied. A DispatchProcessed moves the
run's state only forward in the run's processing order (its ``step``; seq
for an older sidecar's, which has no approval gates); a terminal status is
set only on a run that is not terminal yet. An ApprovalRequested makes a
live run ``waiting``; applying the decision of its last pending approval
makes it ``running`` again. A ChildRunStarted gives the child its ``start``
item (the spawn's input); a child run that ends gives its live parent a
``child`` item. Both are triggers accepted in the same transaction, with
message ids derived from the child's id, so a resent event adds nothing.
Events naming a run outside the sender's deployment are acknowledged (so the
sidecar's outbox moves on) but kept as dead letters, never applied. Each
run's history is trimmed in the same transaction (:mod:`hub.wire.retention`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import aiosqlite
import msgspec

from runtime import (
    DEFAULT_RUN_HISTORY,
    ApprovalRequested,
    ChildRunStarted,
    DispatchOutcome,
    DispatchProcessed,
    EnvelopeQuarantined,
    Event,
    EventsAck,
    FrameDecoder,
    MailSent,
    Reason,
    Refused,
    RunCancelled,
    RunCompleted,
    RunEvents,
    RunFailed,
    RunStarted,
    RunStatus,
    afailpoint,
    encode,
    is_terminal,
)

from .._errors import UnknownDispatch
from ..store import (
    Accepted,
    ApprovalStatus,
    DispatchStatus,
    OutboundMail,
    OutboundStatus,
    Rejected,
    Store,
    Trigger,
    accept_triggers,
    body_digest,
    record_outbound,
)
from .quarantine import ingest_quarantined
from .retention import DeadLetter, DeadLetters, trim_history
from .sessions import SessionTable, fence

log = logging.getLogger("mailrun.hub.events")

# Derived from the classifier, so SQL conditions agree with it.
_NOT_TERMINAL = tuple(s.value for s in RunStatus if not is_terminal(s))
_NOT_TERMINAL_MARKS = ",".join("?" * len(_NOT_TERMINAL))
_OPEN_DISPATCH = (DispatchStatus.RESERVED.value, DispatchStatus.DELIVERED.value)


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
    ) -> None:
        self._store = store
        self._outbox = outbox
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
        released = False
        async with self._store.write() as db:
            await fence(db, session.deployment_id, frame.owner_epoch)
            ingest = _Ingest(db, session.deployment_id, self._subject, time.time(), self._letters)
            for event in frame.events:
                released |= await ingest.event(event)
            status = self._outbox.status if self._outbox else OutboundStatus.NO_RELAY
            woken = await ingest.route(status)
            await trim_history(db, ingest.runs, self._history)
            await afailpoint("hub.events.before_commit")
        # Ingested, not acknowledged: the sidecar will resend these events.
        await afailpoint("hub.events.after_commit")
        if released:
            self._on_released()
        if woken:
            self._on_accepted(woken)
        if ingest.outbound and self._outbox is not None:
            self._outbox.wake()
        return EventsAck(ids=[e.event_id for e in frame.events])


class _Ingest:
    """One frame's events inside one write transaction."""

    def __init__(
        self,
        db: aiosqlite.Connection,
        deployment_id: str,
        subject: str,
        now: float,
        letters: DeadLetters,
    ) -> None:
        self.db = db
        self.deployment_id = deployment_id
        self.subject = subject
        self.now = now
        self.letters = letters
        self.mail: list[MailSent] = []
        self.items: list[Trigger] = []
        """``start`` and ``child`` items, accepted after the frame's events."""
        self.runs: set[str] = set()
        """Runs that got new events: their history is trimmed."""
        self.outbound = 0
        """Outgoing mails recorded for the relay."""

    async def event(self, event: Event) -> bool:
        """Record and apply ``event`` if new; True when it freed a claim-checked body."""
        if isinstance(event, EnvelopeQuarantined):
            # Found by its dispatch: the sidecar may not have read the run id.
            return await ingest_quarantined(
                self.db, self.deployment_id, self.subject, event, self.now, self.letters
            )
        run = await self._one(
            "SELECT status, last_seq, last_step, parent_run_id FROM workflow_run WHERE id = ?"
            " AND deployment_id = ? AND is_anchor = 0",
            (event.run_id, self.deployment_id),
        )
        if run is None:
            await self._dead_letter(event, "foreign_run")
            return False
        cur = await self.db.execute(
            "INSERT OR IGNORE INTO run_event (id, run_id, deployment_id, kind, payload, at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                event.event_id,
                event.run_id,
                self.deployment_id,
                type(event).__name__,
                encode(event),
                event.at or self.now,
            ),
        )
        if cur.rowcount != 1:
            return False
        self.runs.add(event.run_id)
        if isinstance(event, DispatchProcessed):
            return await self._processed(event, run)
        if isinstance(event, RunStarted):
            await self._start(event.run_id)
        elif isinstance(event, RunCompleted):
            await self._finish(run, event.run_id, RunStatus.COMPLETED, result=event.result)
        elif isinstance(event, RunFailed):
            await self._finish(run, event.run_id, RunStatus.FAILED, error=event.error)
        elif isinstance(event, RunCancelled):
            await self._finish(run, event.run_id, RunStatus.CANCELLED, error=event.reason)
        elif isinstance(event, ChildRunStarted):
            await self._child_started(event)
        elif isinstance(event, ApprovalRequested):
            await self.db.execute(
                "INSERT OR IGNORE INTO approval (id, run_id, prompt, status, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (event.approval_id, event.run_id, event.prompt, ApprovalStatus.PENDING, self.now),
            )
            await self.db.execute(
                "UPDATE workflow_run SET status = ?, updated_at = ?"
                " WHERE id = ? AND status IN (?, ?)",
                (RunStatus.WAITING, self.now, event.run_id, RunStatus.PENDING, RunStatus.RUNNING),
            )
        elif isinstance(event, MailSent):
            self.mail.append(event)
        return False

    async def route(self, outbound: OutboundStatus) -> set[str]:
        """Accept the frame's new items and mail in this transaction; return the
        deployments that got dispatches (``outbound``: the first status of mail
        to an address no deployment holds)."""
        woken = await self._route_items()
        return woken | await self._route_mail(outbound)

    async def _route_items(self) -> set[str]:
        if not self.items:
            return set()
        outcomes, woken = await accept_triggers(self.db, self.items)
        for trigger, outcome in zip(self.items, outcomes, strict=True):
            if not isinstance(outcome, Accepted):
                # A parent that ended takes no more child items (its children
                # are cancelled with it): expected, so not a warning.
                log.info(
                    "%s item for run %s not delivered: %s", trigger.kind, trigger.run_id, outcome
                )
        return woken

    async def _route_mail(self, outbound: OutboundStatus) -> set[str]:
        """Accept the new MailSent events addressed to local deployments, and
        record those to addresses no deployment holds as outgoing mail."""
        if not self.mail:
            return set()
        async with self.db.execute(
            "SELECT address FROM deployment WHERE id = ?", (self.deployment_id,)
        ) as cur:
            row = await cur.fetchone()
        sender = row["address"] if row is not None else None
        # Mail from a run is a trigger like any other. Its message id comes
        # from the dispatch that sent it (an older sidecar's: the event id),
        # so it is accepted once however often it is sent, even when a new
        # owner processes that dispatch again.
        mail = [
            Trigger(
                address=e.to,
                sender=sender,
                subject=e.subject,
                body=e.body,
                message_id=e.message_id or e.event_id,
            )
            for e in self.mail
        ]
        outcomes, woken = await accept_triggers(self.db, mail)
        away: list[OutboundMail] = []
        for event, trigger, outcome in zip(self.mail, mail, outcomes, strict=True):
            if isinstance(outcome, Rejected) and outcome.reason == Reason.UNKNOWN_ADDRESS:
                # Nobody here holds it: the mail leaves through the relay,
                # keyed like a local trigger, so a resend is the same mail.
                away.append(
                    OutboundMail(
                        deployment_id=self.deployment_id,
                        run_id=event.run_id,
                        event_id=event.event_id,
                        send_key=trigger.message_id or event.event_id,
                        sender=sender or "",
                        recipient=event.to.strip(),
                        subject=event.subject,
                        body=event.body,
                    )
                )
                continue
            if isinstance(outcome, Rejected) and outcome.reason == Reason.MESSAGE_ID_REUSED:
                # Another trigger holds this id: the mail is not delivered, and
                # the event (acknowledged all the same) is kept where an operator looks.
                log.warning("mail event %s: %s", event.event_id, outcome.detail)
                await self._dead_letter(event, outcome.reason)
            elif not isinstance(outcome, Accepted):
                # A deleted deployment's address, or its run ended: the event is the record.
                log.info(
                    "mail from %s to %s not delivered here: %s",
                    self.deployment_id,
                    trigger.address,
                    outcome,
                )
        if away:
            self.outbound = await record_outbound(self.db, away, outbound)
        return woken

    async def _processed(self, event: DispatchProcessed, run: Any) -> bool:
        dispatch = await self._one(
            "SELECT seq, status, kind, body, body_digest FROM workflow_run_dispatch"
            " WHERE id = ? AND run_id = ?",
            (event.dispatch_id, event.run_id),
        )
        if dispatch is None:
            await self._dead_letter(event, UnknownDispatch.reason)
            return False
        # The hub's own seq for the dispatch is authoritative (a v1-era event
        # may not carry one).
        seq = int(dispatch["seq"])
        refused = event.outcome == DispatchOutcome.REFUSED_TERMINAL
        newer = event.step > run["last_step"] if event.step else seq > run["last_seq"]
        if newer:
            last_seq = max(seq, run["last_seq"])
            if refused:
                await self.db.execute(
                    "UPDATE workflow_run SET last_seq = ?, last_step = ?, updated_at = ?"
                    " WHERE id = ?",
                    (last_seq, event.step, self.now, event.run_id),
                )
            else:
                await self.db.execute(
                    "UPDATE workflow_run SET state = ?, last_seq = ?, last_step = ?,"
                    " updated_at = ? WHERE id = ?",
                    (
                        msgspec.json.encode(event.state).decode(),
                        last_seq,
                        event.step,
                        self.now,
                        event.run_id,
                    ),
                )
                await self._start(event.run_id)
        if dispatch["kind"] == "approval":
            await self._resume(event.run_id)
        # Even an out-of-order event settles its dispatch: the sidecar did
        # process it, and redelivering it would only be refused as duplicate.
        if refused:
            new_status, error = DispatchStatus.CANCELLED, Reason.WORKFLOW_RUN_TERMINAL
        else:
            new_status, error = DispatchStatus.PROCESSED, None
        # Applied, never sent again: an inline body goes, its digest and size
        # stay for a retry's same-content check (hub.md, "Retention").
        inline = dispatch["body_digest"] is None
        digest = body_digest(bytes(dispatch["body"] or b"")) if inline else None
        cur = await self.db.execute(
            "UPDATE workflow_run_dispatch SET status = ?, processed_at = ?,"
            " last_error = COALESCE(?, last_error), body = NULL,"
            " body_digest = COALESCE(body_digest, ?) WHERE id = ? AND status IN (?, ?)",
            (new_status, self.now, error, digest, event.dispatch_id, *_OPEN_DISPATCH),
        )
        return cur.rowcount == 1 and not inline  # a claim-checked body: its blob may go

    async def _resume(self, run_id: str) -> None:
        """waiting -> running once no approval of the run is pending."""
        await self.db.execute(
            "UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ? AND status = ?"
            " AND NOT EXISTS (SELECT 1 FROM approval WHERE run_id = ? AND status = ?)",
            (
                RunStatus.RUNNING,
                self.now,
                run_id,
                RunStatus.WAITING,
                run_id,
                ApprovalStatus.PENDING,
            ),
        )

    async def _start(self, run_id: str) -> None:
        """pending -> running; any later status stays as it is."""
        await self.db.execute(
            "UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ? AND status = ?",
            (RunStatus.RUNNING, self.now, run_id, RunStatus.PENDING),
        )

    async def _child_started(self, event: ChildRunStarted) -> None:
        """The child minted for this spawn gets its entrypoint and its ``start``
        item: sent by the parent, its subject the entrypoint, its body the input."""
        cur = await self.db.execute(
            "UPDATE workflow_run SET entrypoint = ? WHERE id = ? AND parent_run_id = ?"
            " AND deployment_id = ?",
            (event.entrypoint, event.child_run_id, event.run_id, self.deployment_id),
        )
        if cur.rowcount != 1:
            await self._dead_letter(event, "unknown_child")
            return
        self.items.append(
            Trigger(
                deployment_id=self.deployment_id,
                run_id=event.child_run_id,
                kind="start",
                message_id=f"start:{event.child_run_id}",
                sender=event.run_id,
                subject=event.entrypoint,
                body=msgspec.json.encode(event.input),
            )
        )

    async def _finish(
        self,
        run: Any,
        run_id: str,
        status: RunStatus,
        *,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        cur = await self.db.execute(
            f"UPDATE workflow_run SET status = ?, result = ?, error = ?, updated_at = ?"
            f" WHERE id = ? AND status IN ({_NOT_TERMINAL_MARKS})",
            (
                status,
                msgspec.json.encode(result).decode() if result is not None else None,
                error or None,
                self.now,
                run_id,
                *_NOT_TERMINAL,
            ),
        )
        parent = run["parent_run_id"]
        if cur.rowcount == 1 and parent:
            body = {"child_run_id": run_id, "status": status.value, "result": result}
            body["error"] = error or None
            self.items.append(
                Trigger(
                    deployment_id=self.deployment_id,
                    run_id=parent,
                    kind="child",
                    message_id=f"child:{run_id}",
                    sender=run_id,
                    subject=status.value,
                    body=msgspec.json.encode(body),
                )
            )

    async def _dead_letter(self, event: Event, reason: str) -> None:
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
            await self.letters.keep(self.db, letter)

    async def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        async with self.db.execute(sql, params) as cur:
            return await cur.fetchone()
