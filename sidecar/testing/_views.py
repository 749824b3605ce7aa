"""What a test reads from the kit: runs, sent mail, pending timers and
approvals, recorded steps, as plain frozen records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.wire import Attachment


@dataclass(frozen=True)
class SentMail:
    """One ``ctx.send`` committed by a run. ``headers`` are the ones the hub
    gives the message it hands to its relay (From, To, Cc, Subject,
    Message-ID, Reply-To, In-Reply-To, References, and the handler's own);
    the relay adds its own (Date is the hub's, Received and the like the
    relay's). ``internal``: sent to the deployment's own address, so the hub
    made it a mail item of the top-level run instead of relaying it."""

    run_id: str
    to: str
    subject: str
    body: bytes
    message_id: str
    """The send's idempotency key (the dispatch and the send's index)."""
    headers: dict[str, str]
    internal: bool = False
    header_id: str = ""
    """The Message-ID header the mail carries: what ``ctx.send`` returned,
    what :meth:`WorkflowTest.reply` and :meth:`WorkflowTest.bounce` take."""
    html: str | None = None
    cc: list[str] = field(default_factory=list)
    reply_to: str | None = None
    """As the handler gave it (None: the hub sets the run's signed reply address)."""
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class PendingTimer:
    """A timer a run set and the hub keeps until it fires (``timer_id`` is new
    with every set: the fire's message id is ``timer:<timer_id>``)."""

    run_id: str
    name: str
    due_at: float
    payload: Any
    timer_id: str


@dataclass(frozen=True)
class PendingApproval:
    run_id: str
    approval_id: str
    prompt: str
    expires_at: float | None


@dataclass(frozen=True)
class RecordedStep:
    """One ``ctx.step`` outcome as the hub records it, per processed item."""

    dispatch_id: str
    name: str
    index: int
    result: Any
    error: str | None
    attempts: int


@dataclass(frozen=True)
class Delivered:
    """What feeding one item did: its dispatch, and the run it went to.
    ``duplicate``: its message id was taken already, so nothing new was stored."""

    dispatch_id: str
    run_id: str
    duplicate: bool = False


@dataclass
class RunView:
    """One run as the kit knows it after the last settle."""

    run_id: str
    status: str = "pending"
    state: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    parent: str | None = None
    entrypoint: str | None = None
    children: list[str] = field(default_factory=list)
    sent: list[SentMail] = field(default_factory=list)
    steps: list[RecordedStep] = field(default_factory=list)
    """Every step recorded for this run's items, in the order they were taken."""
    suspended_on: str | None = None
    """The dispatch a suspended run failed on."""

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    def steps_of(self, dispatch_id: str) -> list[RecordedStep]:
        """The steps recorded while one item (by dispatch id) was processed."""
        return [s for s in self.steps if s.dispatch_id == dispatch_id]
