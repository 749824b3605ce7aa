"""What a mail carries besides its subject and body, in and out.

Inbound, the hub reads a mail once where it arrives (SMTP, HTTP, the NATS
ingress) and gives its run a :class:`MailContext`: the address it came to
(with its ``+tag``), the thread it answers, and, for SMTP, the sender's SPF,
DKIM and DMARC verdicts. It travels in ``MailInbound.context`` and is kept
in the sidecar's envelope, so a mail processed again sees the same.

Outbound, ``ctx.send`` puts the rich parts of a mail (html, cc, reply-to,
threading headers, attachments) in ``MailSent``; the hub builds the message
from them with the standard library's ``email`` package. A mail the relay
refuses for good, or a delivery status notification that comes back later
for it, reaches the run that sent it as a ``bounce`` item whose body is a
:class:`BounceReport`.
"""

from __future__ import annotations

from typing import Final

import msgspec

BOUNCE_KIND: Final = "bounce"
"""The ``kind`` of the dispatch that tells a run a mail it sent bounced: its
``subject`` is the bounced mail's Message-ID, its body a :class:`BounceReport`
as JSON, its message id ``bounce:<outbox id>`` (one bounce per sent mail)."""

VERDICTS: Final = ("pass", "fail", "none")
"""What an :class:`AuthVerdict` says. ``fail`` includes SPF's softfail and
every permanent error; ``none`` is "nothing to check" (no record, no
signature) and a DNS lookup that did not answer in time."""

ROUTED_BY_HEADERS: Final = "headers"
"""``MailContext.routed_by``: In-Reply-To or References named a mail a run sent."""
ROUTED_BY_REPLY_ADDRESS: Final = "reply_address"
"""``MailContext.routed_by``: the recipient was a run's signed reply address."""
ROUTED_BY_CATCH_ALL: Final = "catch_all"
"""``MailContext.routed_by``: no deployment had the address; its domain's catch-all took it."""

REPLIES_TO_ENDED: Final = ("top_level", "refuse")
"""A deployment's ``replies_to_ended``: a reply to a run that has ended goes
to the deployment's top-level run (the default), or is refused."""


class AuthVerdict(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One check of a mail's sender: ``result`` one of :data:`VERDICTS`,
    ``domain`` the domain it was checked for (SPF: the envelope sender's, or
    HELO's; DKIM: the passing signature's ``d=``; DMARC: the From header's),
    ``detail`` the checker's own word (``softfail``, ``temperror``, ...)."""

    result: str = "none"
    domain: str = ""
    detail: str = ""


class MailAuth(msgspec.Struct, frozen=True, kw_only=True):
    """A mail's sender checks (``item.auth``). ``source`` says who checked:
    ``hub`` (this hub looked the records up) or ``relay`` (read from the
    ``Authentication-Results`` header a trusted MTA in front of the hub wrote)."""

    spf: AuthVerdict = AuthVerdict()
    dkim: AuthVerdict = AuthVerdict()
    dmarc: AuthVerdict = AuthVerdict()
    source: str = "hub"


class MailContext(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the hub read from a mail for its run (``MailInbound.context``).

    ``to`` is the recipient as it was written (``name+tag@domain``); ``tag``
    what followed the ``+`` (None: no tag; a reply address's token is not a
    tag). ``in_reply_to`` is the Message-ID the mail answers, ``thread`` the
    Message-IDs of its thread, oldest first (References, then In-Reply-To,
    each once). ``routed_by`` says how the mail found a run other than the
    address's top-level one (one of the ``ROUTED_BY_*``; "" for none).
    ``auth`` is None for mail that did not come over SMTP from outside."""

    to: str = ""
    tag: str | None = None
    in_reply_to: str | None = None
    thread: list[str] = msgspec.field(default_factory=list)
    routed_by: str = ""
    auth: MailAuth | None = None


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """One attachment of an outgoing mail (``ctx.send(attachments=...)``)."""

    filename: str
    content_type: str = "application/octet-stream"
    data: bytes = b""


class BounceReport(msgspec.Struct, kw_only=True):
    """The body of a ``bounce`` item (JSON): the mail ``message_id`` (what
    ``ctx.send`` returned) was refused for ``recipient``.

    ``status`` is the RFC 3463 status code (``5.1.1``); ``diagnostic`` the
    relay's answer or the report's Diagnostic-Code; ``source`` is ``relay``
    (refused while the hub handed it over) or ``dsn`` (a delivery status
    notification that came back to the mail's bounce address later)."""

    message_id: str
    recipient: str
    status: str
    diagnostic: str = ""
    source: str = "relay"
    bounced_at: float = 0.0
