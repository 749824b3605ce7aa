"""The hub's part, in memory: the kit's stand-in for what the hub keeps and
decides around a sidecar (run ids and seqs, the items it accepts, and the
events it applies: timers, approvals, children, mail, run ends).

Each rule is the hub's as docs/hub.md states it: one top-level run minted
on the first trigger; a message id accepted once; a child's ``start`` item
from its parent's ``ChildRunStarted`` and a ``child`` item to the parent
when it ends; a timer kept per (run, name), moved by a set, gone when it
fires, is cancelled or its run ends; an approval decided once. The items
are envelopes as the sidecar's delivery stores them from a MailInbound.
"""

from __future__ import annotations

import itertools
import secrets
from typing import Any

import msgspec

from runtime import (
    ApprovalRequested,
    ChildRunStarted,
    DispatchProcessed,
    MailSent,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    new_id,
)
from runtime.wire import (
    APPROVAL_TIMEOUT,
    MailContext,
    RunSuspended,
    StepRecorded,
    TimerCancelled,
    TimerFired,
    TimerSet,
)

from ..storage import Envelope
from ._errors import ApprovalDecided, RunEnded, UnknownApproval, UnknownRun
from ._mail import sent_mail, tag_of, thread_of
from ._views import Delivered, PendingApproval, PendingTimer, RecordedStep, RunView, SentMail

ENDED = ("completed", "failed", "cancelled")


def kit_id(prefix: str) -> str:
    """An id of the usual shape for what only the kit names (timer rows, schedules)."""
    return f"{prefix}_{secrets.token_hex(13)}"


class KitHub:
    """The hub's records for one deployment, and the envelopes it has
    accepted but not yet written into the inbox (:meth:`take`)."""

    def __init__(self, deployment_id: str, address: str) -> None:
        self.deployment_id = deployment_id
        self.address = address
        self.top: str | None = None
        self.runs: dict[str, RunView] = {}
        self.sent: list[SentMail] = []
        self.timers: dict[tuple[str, str], PendingTimer] = {}
        self.approvals: dict[str, PendingApproval] = {}
        self.decided: dict[str, str] = {}
        self._seq = itertools.count(1)
        self._accepted: dict[str, Delivered] = {}
        self._minted: dict[str, str] = {}
        self._new: list[Envelope] = []

    # --- accepting ------------------------------------------------------------

    def top_run(self) -> str:
        """The deployment's one top-level run, minted on its first trigger."""
        if self.top is None:
            self.top = new_id("run")
            self.runs[self.top] = RunView(self.top)
        return self.top

    def run(self, run_id: str | None) -> RunView:
        """A run by id (None: the top-level one)."""
        if run_id is None:
            if self.top is None:
                raise UnknownRun("the top-level run has not started: feed it an item first")
            run_id = self.top
        view = self.runs.get(run_id)
        if view is None:
            raise UnknownRun(f"no run {run_id!r} in this test")
        return view

    def accept(
        self,
        *,
        kind: str,
        run_id: str | None = None,
        message_id: str | None = None,
        sender: str | None = None,
        subject: str = "",
        body: bytes = b"",
        force: bool = False,
        context: MailContext | None = None,
    ) -> Delivered:
        """Accept one trigger (None: for the top-level run) as the hub's one
        accept path does; ``force`` takes it for an ended run too (the
        hub's own items: a child's end to a parent is refused there later)."""
        if message_id is not None and message_id in self._accepted:
            first = self._accepted[message_id]
            return Delivered(first.dispatch_id, first.run_id, duplicate=True)
        target = self.top_run() if run_id is None else run_id
        view = self.runs.setdefault(target, RunView(target))
        if view.status in ENDED and not force:
            raise RunEnded(f"run {target} is {view.status}: it takes no more items")
        delivered = Delivered(new_id("dsp"), target)
        if message_id is not None:
            self._accepted[message_id] = delivered
        self._new.append(
            Envelope(
                dispatch_id=delivered.dispatch_id,
                deployment_id=self.deployment_id,
                run_id=target,
                address=self.address,
                seq=next(self._seq),
                kind=kind,
                message_id=message_id,
                sender=sender,
                subject=subject,
                body=body,
                context=context,
            )
        )
        return delivered

    @property
    def accepted_since(self) -> bool:
        """Envelopes were accepted since the last :meth:`take`."""
        return bool(self._new)

    def take(self) -> list[Envelope]:
        """The envelopes accepted since the last call, in seq order."""
        new, self._new = self._new, []
        return new

    def mint_child(self, parent_run_id: str, request_id: str) -> str:
        """The child run of one spawn: the same id for the same request."""
        child = self._minted.get(request_id)
        if child is None:
            child = self._minted[request_id] = new_id("run")
        return child

    def decide(self, approval_id: str, decision: str) -> Delivered:
        """A decision through the hub's one path: refused once decided."""
        if approval_id in self.decided:
            raise ApprovalDecided(
                f"approval {approval_id} was decided already ({self.decided[approval_id]})"
            )
        pending = self.approvals.get(approval_id)
        if pending is None:
            raise UnknownApproval(f"no approval {approval_id!r} in this test")
        if self.runs[pending.run_id].ended:
            # As at the hub: refused, and the approval stays pending.
            raise RunEnded(f"run {pending.run_id} has ended: it takes no decision")
        delivered = self.accept(
            kind="approval",
            run_id=pending.run_id,
            message_id=f"approval:{approval_id}:{decision}",
            subject=decision,
            body=msgspec.json.encode({"approval_id": approval_id, "decision": decision}),
        )
        del self.approvals[approval_id]
        self.decided[approval_id] = decision
        return delivered

    def fire_timer(self, timer: PendingTimer, fired_at: float) -> Delivered:
        """A due timer: its row goes with the item it becomes."""
        del self.timers[(timer.run_id, timer.name)]
        body = TimerFired(
            name=timer.name, due_at=timer.due_at, fired_at=fired_at, payload=timer.payload
        )
        return self.accept(
            kind="timer",
            run_id=timer.run_id,
            message_id=f"timer:{timer.timer_id}",
            subject=timer.name,
            body=msgspec.json.encode(body),
        )

    def time_out(self, approval_id: str) -> Delivered:
        return self.decide(approval_id, APPROVAL_TIMEOUT)

    # --- applying events --------------------------------------------------------

    def apply(self, event: Any) -> None:
        """One event a run committed, as the hub applies it."""
        view = self.runs.setdefault(event.run_id, RunView(event.run_id))
        if isinstance(event, StepRecorded):
            view.steps.append(
                RecordedStep(
                    dispatch_id=event.dispatch_id,
                    name=event.name,
                    index=event.index,
                    result=event.result,
                    error=event.error,
                    attempts=event.attempts,
                )
            )
            return
        if view.status in ENDED:
            return  # the hub applies no effect of a run it has ended
        if isinstance(event, RunStarted | DispatchProcessed):
            if view.status == "pending":
                view.status = "running"
            if isinstance(event, DispatchProcessed):
                view.state = dict(event.state)
        elif isinstance(event, RunCompleted):
            self._ended(view, "completed", result=event.result)
        elif isinstance(event, RunFailed):
            self._ended(view, "failed", error=event.error)
        elif isinstance(event, RunCancelled):
            self._ended(view, "cancelled", error=event.reason or None)
        elif isinstance(event, RunSuspended):
            view.status, view.error, view.suspended_on = "suspended", event.error, event.dispatch_id
        elif isinstance(event, ChildRunStarted):
            self._spawned(view, event)
        elif isinstance(event, MailSent):
            self._mail(view, event)
        elif isinstance(event, ApprovalRequested):
            view.status = "waiting"
            self.approvals[event.approval_id] = PendingApproval(
                event.run_id, event.approval_id, event.prompt, event.expires_at
            )
        elif isinstance(event, TimerSet):
            self.timers[(event.run_id, event.name)] = PendingTimer(
                event.run_id, event.name, event.due_at, event.payload, kit_id("tmr")
            )
        elif isinstance(event, TimerCancelled):
            self.timers.pop((event.run_id, event.name), None)

    def _spawned(self, parent: RunView, event: ChildRunStarted) -> None:
        child = self.runs.setdefault(event.child_run_id, RunView(event.child_run_id))
        child.parent, child.entrypoint = parent.run_id, event.entrypoint
        parent.children.append(child.run_id)
        self.accept(
            kind="start",
            run_id=child.run_id,
            message_id=f"start:{child.run_id}",
            sender=parent.run_id,
            subject=event.entrypoint,
            body=msgspec.json.encode(event.input),
        )

    def _ended(
        self, view: RunView, status: str, *, result: Any = None, error: str | None = None
    ) -> None:
        view.status, view.result, view.error = status, result, error
        # Its timers go (an approval's expiry among them: next_due skips an
        # ended run's); its approvals stay pending, as at the hub.
        for key in [k for k in self.timers if k[0] == view.run_id]:
            del self.timers[key]
        if view.parent is not None and self.runs[view.parent].status not in ENDED:
            body = {"child_run_id": view.run_id, "status": status, "result": result}
            body["error"] = error or None
            self.accept(
                kind="child",
                run_id=view.parent,
                message_id=f"child:{view.run_id}",
                sender=view.run_id,
                subject=status,
                body=msgspec.json.encode(body),
            )

    def _mail(self, view: RunView, event: MailSent) -> None:
        mail = sent_mail(view.run_id, event, self.address)
        view.sent.append(mail)
        self.sent.append(mail)
        if mail.internal and (self.top is None or self.runs[self.top].status not in ENDED):
            # Mail to the deployment's own address is a mail item there.
            self.accept(
                kind="mail",
                message_id=mail.message_id,
                sender=self.address,
                subject=event.subject,
                body=event.body,
                context=MailContext(
                    to=event.to,
                    tag=tag_of(event.to),
                    in_reply_to=event.in_reply_to,
                    thread=thread_of(event.in_reply_to, event.references),
                ),
            )
