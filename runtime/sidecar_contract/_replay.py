"""The replay's job and answer: what the hub writes to the scratch process
(``python -m sidecar.replay``) and what it reads back, as JSON. Here because
both sides read them, and hub and sidecar never import each other
(docs/replay.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any

import msgspec

from ..wire import (
    ApprovalRequested,
    ChildRunStarted,
    DispatchOutcome,
    Event,
    MailContext,
    MailSent,
    StepRecorded,
    TimerCancelled,
    TimerSet,
)

REPLAY_ITEM_TIMEOUT = 30.0
"""Seconds one handler call of a replay may take before it counts as raised."""


class RecordedEffect(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One effect a handler call asked for: ``mail`` (ctx.send), ``spawn``,
    ``approval`` (ctx.request_approval), ``timer`` (ctx.set_timer) or
    ``timer_cancel`` (ctx.cancel_timer)."""

    kind: str
    to: str = ""
    subject: str = ""
    body: bytes = b""
    entrypoint: str = ""
    input: Any = None
    prompt: str = ""
    child_run_id: str = ""
    """The child the hub minted: replay hands the same ids out again, so a
    state that holds one compares equal."""
    name: str = ""
    """A timer's name (``timer``, ``timer_cancel``)."""
    payload: Any = None
    """A timer's payload."""
    due_at: float | None = None
    """When a timer is due (epoch seconds). None on a replayed timer set with
    ``after=``: a delay from the clock at the call, whose due time is not
    compared."""
    expires: bool = False
    """An approval asked with a timeout: only that it expires is compared,
    its expiry depending on the clock at the call."""
    rich: dict[str, Any] = msgspec.field(default_factory=dict)
    """A mail's parts beyond recipient, subject and body (:func:`mail_parts`);
    empty for a plain mail."""


def effect_of(event: Event, relative: Collection[str] = ()) -> RecordedEffect | None:
    """The effect ``event`` records, if it is one a handler asks for: how the
    hub writes a run's history into the job and how the replay compares the
    calls it makes. ``relative`` holds the event ids of timers set ``after=`` a
    delay, whose due time depends on the clock of the call and is not kept."""
    if isinstance(event, MailSent):
        return RecordedEffect(
            kind="mail",
            to=event.to,
            subject=event.subject,
            body=event.body,
            rich=mail_parts(event),
        )
    if isinstance(event, ChildRunStarted):
        return RecordedEffect(
            kind="spawn",
            entrypoint=event.entrypoint,
            input=event.input,
            child_run_id=event.child_run_id,
        )
    if isinstance(event, ApprovalRequested):
        expires = event.expires_at is not None
        return RecordedEffect(kind="approval", prompt=event.prompt, expires=expires)
    if isinstance(event, TimerSet):
        due_at = None if event.event_id in relative else event.due_at
        return RecordedEffect(kind="timer", name=event.name, payload=event.payload, due_at=due_at)
    if isinstance(event, TimerCancelled):
        return RecordedEffect(kind="timer_cancel", name=event.name)
    return None


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def mail_parts(event: MailSent) -> dict[str, Any]:
    """What a sent mail carries besides recipient, subject and body, as a
    replay compares and shows it: html and attachments by their sha256 (a
    report holds two items' effects), the rest as given; absent parts left
    out. The Message-ID is not among them: it is the dispatch's, always
    the same."""
    parts: dict[str, Any] = {
        "html": None if event.html is None else _digest(event.html.encode("utf-8")),
        "cc": event.cc,
        "reply_to": event.reply_to,
        "in_reply_to": event.in_reply_to,
        "references": event.references,
        "headers": event.headers,
        "attachments": [
            {"filename": a.filename, "content_type": a.content_type, "data": _digest(a.data)}
            for a in event.attachments
        ],
    }
    return {name: value for name, value in parts.items() if value}


class RecordedEnd(msgspec.Struct, kw_only=True):
    kind: str  # "completed", "failed" or "cancelled"
    result: Any = None
    error: str = ""


class Recorded(msgspec.Struct, kw_only=True):
    state: dict[str, Any]
    """The run's state after the item."""
    outcome: str = DispatchOutcome.PROCESSED
    effects: list[RecordedEffect] = msgspec.field(default_factory=list)
    end: RecordedEnd | None = None


class ReplayItem(msgspec.Struct, kw_only=True):
    """One item of a run's history, with what the run recorded of it."""

    dispatch_id: str
    seq: int
    kind: str = "mail"
    message_id: str | None = None
    sender: str | None = None
    subject: str | None = None
    body: bytes | None = None
    """None: the store no longer holds the body, so the handler cannot be
    called with it; replay takes its recorded state and goes on after it."""
    step: int = 0
    version: int = 0
    recorded: Recorded
    steps: list[StepRecorded] = msgspec.field(default_factory=list)
    """The steps (``ctx.step``) the run recorded for this dispatch, in their
    index order: replay returns their results instead of calling them."""
    context: MailContext | None = None
    """What the hub read from the mail (its tag, thread, sender checks): the
    replayed item's as the run's was."""


class ReplayJob(msgspec.Struct, kw_only=True):
    files: dict[str, str]
    entrypoint: str
    deployment_id: str
    run_id: str
    start_state: dict[str, Any] = msgspec.field(default_factory=dict)
    start: str = "beginning"
    """``beginning``, or ``after step K`` when the run's first events are gone."""
    items: list[ReplayItem] = msgspec.field(default_factory=list)
    skipped: list[str] = msgspec.field(default_factory=list)
    """What the history leaves out, and why (for the report)."""
    item_timeout: float = REPLAY_ITEM_TIMEOUT
    address: str = ""
    """The deployment's address: its domain is the right side of the
    Message-IDs ``ctx.send`` returns ("": the default domain's)."""


class ReplayDifference(msgspec.Struct, kw_only=True):
    step: int
    seq: int
    dispatch_id: str
    kind: str
    what: str
    """``state``, ``effects``, ``end``, ``steps`` (a step taken that the run
    never took, one at another place, or one it took left out) or ``error``
    (one side raised)."""
    recorded: dict[str, Any]
    replayed: dict[str, Any]


class ReplayReport(msgspec.Struct, kw_only=True):
    run_id: str
    differs: bool
    replayed: int
    """Handler calls made."""
    start: str
    first_step: int | None = None
    last_step: int | None = None
    skipped: list[str] = msgspec.field(default_factory=list)
    difference: ReplayDifference | None = None


class ReplayFailureReport(msgspec.Struct, kw_only=True):
    """The scratch process's answer when the replay cannot be made."""

    error: str  # "load_failed", "migrate_failed" or "bad_job"
    detail: str = ""
