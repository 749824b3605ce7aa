"""Applying one RunEvents frame's events, in the frame's write transaction.

See :mod:`hub.wire.events` for the rules; :mod:`hub.wire.routing` turns the
mail the events send into triggers or outgoing mail.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from itertools import groupby
from typing import Any, cast

import msgspec

from runtime import (
    DEFAULT_RUN_HISTORY,
    ApprovalRequested,
    ChildRunStarted,
    Connection,
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
)

from ..store import (
    Accepted,
    ApprovalStatus,
    OutboundStatus,
    Trigger,
    accept_triggers,
    fetch_one,
    run_in,
)
from .processed import ProcessedBatch
from .quarantine import ingest_quarantined
from .retention import DeadLetter, DeadLetters
from .routing import child_item, route_mail, start_item

log = logging.getLogger("mailrun.hub.events")

# Derived from the classifier, so SQL conditions agree with it.
_NOT_TERMINAL = tuple(s.value for s in RunStatus if not is_terminal(s))
_NOT_TERMINAL_MARKS = ",".join("?" * len(_NOT_TERMINAL))


class Ingest:
    """One frame's events inside one write transaction."""

    def __init__(
        self,
        db: Connection,
        deployment_id: str,
        subject: str,
        now: float,
        letters: DeadLetters,
        history: int = DEFAULT_RUN_HISTORY,
    ) -> None:
        self.db = db
        self.history = history
        self.deployment_id = deployment_id
        self.subject = subject
        self.now = now
        self.letters = letters
        self.mail: list[MailSent] = []
        self.items: list[Trigger] = []
        """``start`` and ``child`` items, accepted after the frame's events."""
        self.runs: set[str] = set()
        """Runs that got new events: their history is trimmed."""
        self.settled_after: list[float] = []
        """Seconds from acceptance of each dispatch the frame settled (metrics)."""
        self.outbound = 0
        """Outgoing mails recorded for the relay."""

    async def events(self, events: Sequence[Event]) -> bool:
        """Record and apply each new event in order; True when one freed a
        claim-checked body. Consecutive DispatchProcessed events go as one
        batch (:mod:`hub.wire.processed`), with the same outcome."""
        released = False
        for processed, group in groupby(events, key=lambda e: isinstance(e, DispatchProcessed)):
            if processed:
                batch = ProcessedBatch(
                    self.db, self.deployment_id, self.now, self._dead_letter, keep=self.history
                )
                released |= await batch.apply(cast(list[DispatchProcessed], list(group)))
                self.runs |= batch.runs_with_events
                self.settled_after += batch.settled_after
            else:
                for event in group:
                    released |= await self.event(event)
        return released

    async def event(self, event: Event) -> bool:
        """Record and apply ``event`` (any but a DispatchProcessed) if new;
        True when it freed a claim-checked body."""
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
        outcomes, woken = await run_in(self.db, partial(accept_triggers, triggers=self.items))
        for trigger, outcome in zip(self.items, outcomes, strict=True):
            if not isinstance(outcome, Accepted):
                # A parent that ended takes no more child items (its children
                # are cancelled with it): expected, so not a warning.
                log.info(
                    "%s item for run %s not delivered: %s", trigger.kind, trigger.run_id, outcome
                )
        return woken

    async def _route_mail(self, outbound: OutboundStatus) -> set[str]:
        woken, self.outbound = await route_mail(
            self.db, self.deployment_id, self.mail, outbound, self._dead_letter
        )
        return woken

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
        self.items.append(start_item(self.deployment_id, event))

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
            self.items.append(child_item(self.deployment_id, parent, run_id, status, result, error))

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
        return await fetch_one(self.db, sql, params)
