"""The run events a sidecar ships to the hub (inside ``RunEvents`` frames):
msgspec Structs tagged by ``t`` like the frames, each what one committed
step of a run did (started, processed a dispatch, sent mail, asked for an
approval, set a timer, recorded a step, ended).

An event is persisted in the sidecar's outbox before it is sent, and the
hub applies each once, by its ``event_id``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._mail import Attachment
from ._reasons import DispatchOutcome


class _Event(msgspec.Struct, tag_field="t", kw_only=True):
    event_id: str  # evt_..., minted by the sidecar, persisted before sending
    run_id: str
    at: float = 0.0


class RunStarted(_Event, tag=True, kw_only=True):
    """Committed with the run's first item here: ``pending`` -> ``running``."""


class DispatchProcessed(_Event, tag=True, kw_only=True):
    """The sidecar consumed this dispatch; ``state`` is the run's new state.

    ``outcome`` (runtime.DispatchOutcome) says how: the handler committed it
    (``processed``), the run had ended (``refused_terminal``), or the run
    failed on it (``failed``)."""

    dispatch_id: str
    seq: int | None = None
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    outcome: str = DispatchOutcome.PROCESSED
    step: int = 0
    """The run's count of processed items, this one included: the order the
    run processed them in, which is seq order except where an approval
    decision overtook the items its gate held. 0 from an older sidecar (the
    hub then orders by seq)."""
    version: int = 0
    """The workflow version that processed it (0 from an older sidecar)."""
    error: str = ""
    """Why it was not processed: the last attempt's error of a ``failed`` or
    ``parked`` one."""
    trace: dict[str, str] = msgspec.field(default_factory=dict)
    """The W3C trace context of the handler call that processed it, when the
    sidecar traces (docs/tracing.md); empty otherwise."""


class RunCompleted(_Event, tag=True, kw_only=True):
    """The handler called ``ctx.complete(result)``: the run ended ``completed``."""

    result: Any = None


class RunFailed(_Event, tag=True, kw_only=True):
    """The run ended ``failed``: ``ctx.fail(error)``, or its handler failed for
    good (its retries spent, a value over its size limit)."""

    error: str = ""


class RunSuspended(_Event, tag=True, kw_only=True):
    """The handler failed on ``dispatch_id`` past its retry budget under the
    ``suspend`` policy: the run is ``suspended``, that item and every later
    one held, until a ``resume`` item (a resume, or a new version) comes."""

    dispatch_id: str
    attempts: int = 0
    error: str = ""


class RunCancelled(_Event, tag=True, kw_only=True):
    """The run ended ``cancelled``: its parent ended while it was live, or it
    was cancelled from outside (``reason``: the one the cancel gave)."""

    reason: str = ""


class ChildRunStarted(_Event, tag=True, kw_only=True):
    """``ctx.spawn`` committed: the hub accepts the child's ``start`` item."""

    child_run_id: str
    entrypoint: str = ""
    input: Any = None
    trace: dict[str, str] = msgspec.field(default_factory=dict)
    """The W3C trace context of the ``ctx.spawn``, which the child's trace
    links to, when the sidecar traces; empty otherwise."""


class MailSent(_Event, tag=True, kw_only=True):
    """``ctx.send`` committed: mail to a deployment's address becomes a trigger
    there, any other leaves through the outbound relay."""

    to: str
    subject: str = ""
    body: bytes = b""
    message_id: str | None = None
    """Derived from the dispatch and the send's index in the handler call, so
    the same item processed again (after a takeover) sends the same mail,
    which the hub accepts once. Absent from older sidecars: the event id."""
    header_id: str | None = None
    """The ``Message-ID`` header the mail carries (``<...@domain>``), which
    ``ctx.send`` returned: made from ``message_id`` and the deployment's
    domain, so it is the same when the item is processed again. Absent from
    older sidecars: the hub makes one from the event id."""
    html: str | None = None
    cc: list[str] = msgspec.field(default_factory=list)
    reply_to: str | None = None
    """None: the hub sets the run's signed reply address (docs/smtp.md)."""
    in_reply_to: str | None = None
    references: list[str] = msgspec.field(default_factory=list)
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    """Extra headers, by name (``X-...`` and the like; the hub refuses to let
    them replace the ones it writes: From, To, Cc, Subject, Date, Message-ID,
    Reply-To, In-Reply-To, References, MIME headers)."""
    attachments: list[Attachment] = msgspec.field(default_factory=list)
    trace: dict[str, str] = msgspec.field(default_factory=dict)
    """The W3C trace context of the ``ctx.send``, which the mail's relay (or
    the dispatch it becomes here) continues, when the sidecar traces; empty
    otherwise."""


class ApprovalRequested(_Event, tag=True, kw_only=True):
    """``ctx.request_approval`` committed: the run waits for the decision."""

    approval_id: str
    prompt: str = ""
    expires_at: float | None = None
    """When the approval expires undecided (``timeout=``): the hub then decides
    it ``timeout`` (:data:`APPROVAL_TIMEOUT`). None: it waits for ever."""


class TimerSet(_Event, tag=True, kw_only=True):
    """``ctx.set_timer`` committed: the run's timer ``name`` is due at
    ``due_at`` (epoch seconds). Setting a name the run has set already moves
    that timer (its new due time and payload replace the old)."""

    name: str
    due_at: float
    payload: Any = None


class TimerCancelled(_Event, tag=True, kw_only=True):
    """``ctx.cancel_timer`` committed: the run's timer ``name`` will not fire
    (nothing, when the run has no such timer pending)."""

    name: str


class StepRecorded(_Event, tag=True, kw_only=True):
    """``ctx.step`` returned (or failed for good) while ``dispatch_id`` was
    being processed: written to the outbox at once, before the item commits,
    so processing that item again (a retry, a crash, a new owner) returns
    ``result`` (or raises ``error``) without calling the step again.
    ``index`` is the step's place (1, 2...) in that processing; replay
    reports a step whose name is not at its recorded place."""

    dispatch_id: str
    name: str
    index: int
    result: Any = None
    error: str | None = None
    """Set when the step failed for good (its retries spent): ``Type: message``."""
    attempts: int = 1


class EnvelopeQuarantined(_Event, tag=True, kw_only=True):
    """The sidecar could not read a stored envelope: it set it aside (its own
    dead letter table) instead of processing it, so later dispatches go on.
    ``run_id`` is "" when the envelope was too damaged to name its run; the
    hub finds the run by ``dispatch_id``."""

    dispatch_id: str
    reason: str = ""


Event = (
    RunStarted
    | DispatchProcessed
    | RunCompleted
    | RunFailed
    | RunCancelled
    | RunSuspended
    | ChildRunStarted
    | MailSent
    | ApprovalRequested
    | TimerSet
    | TimerCancelled
    | StepRecorded
    | EnvelopeQuarantined
)
"""A new event type is a compatible change only hub-first: an older hub
refuses a frame carrying a tag it does not know (the sidecar keeps resending
it), so upgrade the hub before its sidecars."""
