"""An inbox envelope as the item its handler receives (:func:`item_of`).

A kind's fields come from the envelope's body, which the hub writes (JSON
for every kind but mail); a body that does not decode leaves them empty
instead of failing the run. A mail's ``to``, ``tag``, thread and sender
checks come from what the hub read from it (``Envelope.context``); a mail
stored without one (from an older hub) has them empty.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from runtime.wire import BOUNCE_KIND, CANCEL_KIND, SCHEDULE_KIND, TIMER_KIND

from ...storage import Envelope
from ._kinds import (
    ApprovalDecision,
    Bounce,
    Cancel,
    ChildEnded,
    Item,
    Mail,
    ScheduleFire,
    Signal,
    Start,
    Timer,
    auth_of,
)

_NOT_JSON = object()


def _json(body: bytes) -> Any:
    """The body's JSON value, or ``_NOT_JSON``. A hub writes these bodies, but
    an item must reach the handler whatever the bytes: a body that does not
    decode leaves the kind's fields empty instead of failing the run."""
    try:
        return msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return _NOT_JSON


def _object(body: bytes) -> dict[str, Any]:
    value = _json(body)
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _signal(common: dict[str, Any], body: bytes) -> Item:
    payload = _json(body)
    return Signal(
        **common, name=common["subject"], payload=None if payload is _NOT_JSON else payload
    )


def _approval(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    return ApprovalDecision(
        **common,
        approval_id=_text(fields.get("approval_id")),
        decision=_text(fields.get("decision")),
    )


def _start(common: dict[str, Any], body: bytes) -> Item:
    value = _json(body)
    return Start(**common, input=None if value is _NOT_JSON else value)


def _child(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    error = fields.get("error")
    return ChildEnded(
        **common,
        child_run_id=_text(fields.get("child_run_id")),
        status=_text(fields.get("status")),
        result=fields.get("result"),
        error=error if isinstance(error, str) else None,
    )


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _timer(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    return Timer(
        **common,
        name=_text(fields.get("name")) or common["subject"],
        payload=fields.get("payload"),
        due_at=_number(fields.get("due_at")),
        fired_at=_number(fields.get("fired_at")),
    )


def _schedule(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    return ScheduleFire(
        **common,
        schedule_id=_text(fields.get("schedule_id")),
        payload=fields.get("payload"),
        due_at=_number(fields.get("due_at")),
        fired_at=_number(fields.get("fired_at")),
    )


def cancel_order(envelope: Envelope) -> tuple[str, bool]:
    """A ``cancel`` envelope's ``(reason, terminate)``: its body's, the
    subject for a reason the body lacks, and no terminate unless it says so."""
    fields = _object(envelope.body or b"")
    reason = fields.get("reason")
    text = reason if isinstance(reason, str) else envelope.subject or ""
    return text, fields.get("terminate") is True


def _cancel(common: dict[str, Any], body: bytes) -> Item:
    reason = _object(body).get("reason")
    return Cancel(**common, reason=reason if isinstance(reason, str) else common["subject"])


def _bounce(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    # The bounced mail's id, not the dispatch's own (``bounce:<outbox id>``):
    # the one the handler kept from ctx.send. The subject says it too.
    mail_id = _text(fields.get("message_id")) or common["subject"]
    return Bounce(
        **{**common, "message_id": mail_id},
        recipient=_text(fields.get("recipient")),
        status=_text(fields.get("status")),
        diagnostic=_text(fields.get("diagnostic")),
        source=_text(fields.get("source")),
        bounced_at=_number(fields.get("bounced_at")),
    )


def _mail(common: dict[str, Any], envelope: Envelope) -> Mail:
    context = envelope.context
    if context is None:
        return Mail(**common, raw=envelope.raw)
    return Mail(
        **common,
        raw=envelope.raw,
        to=context.to,
        tag=context.tag,
        in_reply_to=context.in_reply_to,
        thread=list(context.thread),
        routed_by=context.routed_by,
        auth=auth_of(context.auth),
    )


# The item of each kind but mail (an unknown kind arrives as Mail); docs/sidecar.md,
# "Items", has the body each kind carries.
_ITEMS: dict[str, Callable[[dict[str, Any], bytes], Item]] = {
    "signal": _signal,
    "approval": _approval,
    "start": _start,
    "child": _child,
    CANCEL_KIND: _cancel,
    TIMER_KIND: _timer,
    SCHEDULE_KIND: _schedule,
    BOUNCE_KIND: _bounce,
}


def item_of(envelope: Envelope) -> Item:
    """The handler's view of an envelope; an unknown kind arrives as Mail with its kind kept."""
    body = envelope.body or b""
    common: dict[str, Any] = {
        "kind": envelope.kind,
        "dispatch_id": envelope.dispatch_id,
        "message_id": envelope.message_id,
        "sender": envelope.sender,
        "subject": envelope.subject or "",
        "body": body,
        "text": body.decode("utf-8", errors="replace"),
        "run_id": envelope.effective_run_id,
        "seq": envelope.seq,
    }
    make = _ITEMS.get(envelope.kind)
    return make(common, body) if make is not None else _mail(common, envelope)
