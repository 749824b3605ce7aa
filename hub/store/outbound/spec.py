"""The rich parts of an outgoing mail (``outbound_mail.spec``), and what makes
them unsendable.

A run's ``ctx.send`` may give html, Cc, Reply-To, threading headers, extra
headers and attachments (``runtime.MailSent``); the row keeps them as the
msgpack of :class:`OutboundSpec` (NULL when there are none, as for every row
written before migration 20), and the relay builds the message from them
(``hub.outbound``). What can never become a valid message is refused where
the row is recorded, so the row is ``failed`` at once with its reason: a
header the hub writes itself, CR or LF in a header, an address that is not
one mailbox.
"""

from __future__ import annotations

import email.errors
import email.policy
import re
from typing import Any, Final

import msgspec

from runtime.wire import Attachment

# One mailbox, bare: no display name, no whitespace, one "@".
BARE_ADDRESS: Final = re.compile(r"[^@\s<>,;\"()]+@[^@\s<>,;\"()]+")

HUB_HEADERS: Final = frozenset(
    {
        "from", "to", "cc", "bcc", "subject", "date", "message-id", "reply-to",
        "in-reply-to", "references", "mime-version", "dkim-signature", "return-path",
        "sender",
    }
)  # fmt: skip
"""Headers the hub writes (or that say who sent the mail, and to whom): a
mail's ``headers`` may not give them, nor any ``Content-*``."""

# A field name: printable ASCII but the colon (RFC 5322 section 3.6.8).
_FIELD_NAME = re.compile(r"[!-9;-~]+")
# A Message-ID as In-Reply-To and References carry it: one <...>, no spaces.
_MSG_ID = re.compile(r"<[^<>\s]+>")
# A MIME type: type/subtype, RFC 2045 tokens.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_CONTENT_TYPE = re.compile(rf"{_TOKEN}/{_TOKEN}")
_ADDRESS_POLICY = email.policy.SMTPUTF8
_NON_ASCII = email.errors.NonASCIILocalPartDefect
_MAX_HEADER = 998  # the longest line RFC 5322 allows, a header's value folded or not


class OutboundSpec(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """What a mail has besides sender, recipient, subject and text: kept in
    ``outbound_mail.spec``. ``cc`` are recipients too; ``reply_to`` None
    means the hub's signed reply address; ``headers`` keep their order."""

    html: str | None = None
    cc: tuple[str, ...] = ()
    reply_to: str | None = None
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()


PLAIN: Final = OutboundSpec()
"""A mail with none of the rich parts: stored as NULL."""

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(OutboundSpec)


def encode_spec(spec: OutboundSpec) -> bytes | None:
    """The column's value: NULL for a plain mail."""
    return None if spec == PLAIN else _ENCODER.encode(spec)


def decode_spec(data: bytes | None) -> OutboundSpec:
    """The spec a row holds; raises ``ValueError`` for one that does not decode."""
    if not data:
        return PLAIN
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"the stored spec does not decode: {exc}") from None


def one_mailbox(text: str) -> tuple[str, str]:
    """``(display name, address)`` of ``text``, one mailbox with or without a
    display name (``Zoë <z@example.org>``); raises ``ValueError`` otherwise."""
    if any(c in text for c in "\r\n\0"):
        raise ValueError(f"{text[:200]!r} is not one line")
    header = _ADDRESS_POLICY.header_factory("To", text)
    addresses: tuple[Any, ...] = getattr(header, "addresses", ())
    # A local part that is not ASCII is a mailbox still: it needs SMTPUTF8.
    defects = [d for d in header.defects if not isinstance(d, _NON_ASCII)]
    if len(addresses) != 1 or defects:
        raise ValueError(f"{text[:200]!r} is not one mail address")
    address = addresses[0]
    if BARE_ADDRESS.fullmatch(address.addr_spec) is None:
        raise ValueError(f"{text[:200]!r} is not one mail address")
    return address.display_name, address.addr_spec


def _header_problem(name: str, value: str) -> str | None:
    if _FIELD_NAME.fullmatch(name) is None:
        return f"header name {name[:100]!r} is not a field name"
    lowered = name.lower()
    if lowered in HUB_HEADERS or lowered.startswith("content-"):
        return f"header {name!r} is one the hub writes"
    if any(c in value for c in "\r\n\0"):
        return f"header {name!r} is not one line"
    if len(name) + len(value) > _MAX_HEADER:
        return f"header {name!r} is longer than {_MAX_HEADER} characters"
    return None


def _id_problem(what: str, value: str) -> str | None:
    if _MSG_ID.fullmatch(value) is None:
        return f"{what} {value[:200]!r} is not one <message-id>"
    return None


def _attachment_problem(attachment: Attachment) -> str | None:
    name = attachment.filename
    if not name or any(c in name for c in "\r\n\0/\\"):
        return f"attachment filename {name[:100]!r} is not a file name"
    if _CONTENT_TYPE.fullmatch(attachment.content_type) is None:
        kind = attachment.content_type[:100]
        return f"attachment {name!r}: content type {kind!r} is not type/subtype"
    if attachment.content_type.lower().startswith("multipart/"):
        return f"attachment {name!r}: a multipart content type is not one attachment"
    return None


def spec_problem(spec: OutboundSpec) -> str | None:
    """Why ``spec`` can never be a message (None: it can), as ``invalid_mail``
    or ``invalid_address`` and the part that is wrong."""
    for cc in spec.cc:
        try:
            one_mailbox(cc)
        except ValueError as exc:
            return f"invalid_address: Cc {exc}"
    if spec.reply_to is not None:
        try:
            one_mailbox(spec.reply_to)
        except ValueError as exc:
            return f"invalid_address: Reply-To {exc}"
    problems = [_header_problem(name, value) for name, value in spec.headers.items()]
    if spec.in_reply_to is not None:
        problems.append(_id_problem("In-Reply-To", spec.in_reply_to))
    problems += [_id_problem("References", ref) for ref in spec.references]
    problems += [_attachment_problem(a) for a in spec.attachments]
    if spec.html is not None and "\0" in spec.html:
        problems.append("the html has a NUL character")
    why = next((p for p in problems if p is not None), None)
    return None if why is None else f"invalid_mail: {why}"
