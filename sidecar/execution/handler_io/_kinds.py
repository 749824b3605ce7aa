"""The items a handler receives: one frozen struct per dispatch kind
(``_build`` builds them from inbox envelopes; docs/sidecar.md, "Items",
has each kind's fields)."""

from __future__ import annotations

from typing import Any

import msgspec

from runtime import wire
from runtime.wire import BOUNCE_KIND, CANCEL_KIND, SCHEDULE_KIND, TIMER_KIND


class AuthVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """One check of a mail's sender: ``result`` is ``pass``, ``fail`` (SPF's
    softfail and permanent errors included) or ``none`` (nothing to check,
    or DNS did not answer in time); ``domain`` the domain checked (SPF: the
    envelope sender's; DKIM: the passing signature's ``d=``; DMARC: the From
    header's); ``detail`` the checker's own word (``softfail``, ...)."""

    result: str = "none"
    domain: str = ""
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.result == "pass"


class MailAuth(msgspec.Struct, frozen=True, kw_only=True):
    """A mail's sender checks (``item.auth``): SPF, DKIM and DMARC. ``source``
    says who checked: ``hub`` (it looked the records up) or ``relay`` (read
    from the ``Authentication-Results`` of a trusted MTA in front of it)."""

    spf: AuthVerdict = AuthVerdict()
    dkim: AuthVerdict = AuthVerdict()
    dmarc: AuthVerdict = AuthVerdict()
    source: str = "hub"


def auth_of(auth: wire.MailAuth | MailAuth | None) -> MailAuth | None:
    """The handler's view of the hub's verdicts (the same fields)."""
    if auth is None or isinstance(auth, MailAuth):
        return auth
    return msgspec.convert(msgspec.to_builtins(auth), MailAuth)


def wire_auth(auth: wire.MailAuth | MailAuth | None) -> wire.MailAuth | None:
    """The verdicts as the hub sends them (the test kit delivers them so)."""
    if auth is None or isinstance(auth, wire.MailAuth):
        return auth
    return msgspec.convert(msgspec.to_builtins(auth), wire.MailAuth)


class Item(msgspec.Struct, frozen=True, kw_only=True):
    """What a handler receives for one dispatch (base of every kind's item)."""

    kind: str
    dispatch_id: str
    message_id: str | None = None
    sender: str | None = None
    subject: str = ""
    body: bytes = b""
    text: str = ""
    run_id: str = ""
    seq: int | None = None


class Mail(Item, frozen=True, kw_only=True):
    """A mail. ``raw`` is the whole message as it came over SMTP (headers,
    every part, as sent: parse it with ``email.message_from_bytes``); None
    for a mail from HTTP, NATS or ``ctx.send``.

    ``to`` is the address it was sent to as written (``name+tag@domain``),
    ``tag`` what followed the ``+`` (None: no tag). ``in_reply_to`` is the
    Message-ID it answers (one ``ctx.send`` returned, when it found this run
    as a reply), ``thread`` the Message-IDs of its thread, oldest first;
    ``routed_by`` how it found a run other than the top-level one
    (``headers``, ``reply_address``, ``catch_all``; "" for none). ``auth``
    holds its sender's SPF, DKIM and DMARC verdicts (None: it did not come
    over SMTP from outside)."""

    kind: str = "mail"
    raw: bytes | None = None
    to: str = ""
    tag: str | None = None
    in_reply_to: str | None = None
    thread: list[str] = msgspec.field(default_factory=list)
    routed_by: str = ""
    auth: MailAuth | None = None


class Signal(Item, frozen=True, kw_only=True):
    """``POST /runs/{id}/signals``: ``name`` is the subject, ``payload`` the
    body's JSON value (``None`` when the body is not JSON)."""

    kind: str = "signal"
    name: str = ""
    payload: Any = None


class ApprovalDecision(Item, frozen=True, kw_only=True):
    """The decision of an approval this run requested: ``approve``, ``reject``,
    or ``timeout`` when it was asked with a timeout that passed undecided."""

    kind: str = "approval"
    approval_id: str = ""
    decision: str = ""


class Start(Item, frozen=True, kw_only=True):
    """A child run's first item: ``input`` is the value its parent gave ``spawn``."""

    kind: str = "start"
    input: Any = None


class ChildEnded(Item, frozen=True, kw_only=True):
    """A child of this run ended: ``status`` is completed, failed or cancelled."""

    kind: str = "child"
    child_run_id: str = ""
    status: str = ""
    result: Any = None
    error: str | None = None


class Timer(Item, frozen=True, kw_only=True):
    """A timer this run set (``ctx.set_timer``) is due: ``name`` and ``payload``
    as it was set, ``due_at`` when it was due and ``fired_at`` when the hub
    fired it (later than due after an outage), epoch seconds."""

    kind: str = TIMER_KIND
    name: str = ""
    payload: Any = None
    due_at: float = 0.0
    fired_at: float = 0.0


class ScheduleFire(Item, frozen=True, kw_only=True):
    """One fire of a schedule of the deployment (``mailrun schedule add``), for
    its top-level run: ``subject`` and ``payload`` as the schedule has them."""

    kind: str = SCHEDULE_KIND
    schedule_id: str = ""
    payload: Any = None
    due_at: float = 0.0
    fired_at: float = 0.0


class Cancel(Item, frozen=True, kw_only=True):
    """A cancel from outside (``mailrun cancel``): ``reason`` is the one it
    was given. The run ends ``cancelled`` once this item is processed,
    whatever the handler does with it (a ``complete`` or ``fail`` included)."""

    kind: str = CANCEL_KIND
    reason: str = ""


class Bounce(Item, frozen=True, kw_only=True):
    """A mail this run sent bounced: ``message_id`` is its Message-ID (what
    ``ctx.send`` returned), refused for ``recipient`` with ``status`` (RFC
    3463, ``5.1.1``) and ``diagnostic`` (the relay's answer, or the report's
    Diagnostic-Code). ``source``: ``relay`` (refused as the hub handed it
    over) or ``dsn`` (a delivery status notification came back later);
    ``bounced_at`` when the hub learnt it (epoch seconds)."""

    kind: str = BOUNCE_KIND
    recipient: str = ""
    status: str = ""
    diagnostic: str = ""
    source: str = ""
    bounced_at: float = 0.0
