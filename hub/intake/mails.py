"""A mail as every door hands it in (``POST /mail``, a mail of ``POST
/mail/batch`` or of the NATS ingress, one recipient of an SMTP message) ->
a checked mail trigger, addressed to the recipient's base address, with the
mail's context (the recipient as written, its tag, its thread).

Fields that end up in a mail header or a log line (``to``, ``from``,
``subject``, ``message_id``) are one line each: a CR or LF there would let
a sender forge headers of a mail a run sends on.
"""

from __future__ import annotations

import base64
import binascii
import re

import msgspec

from runtime.wire import IngressMail

from .._errors import InvalidMail, PayloadTooLarge
from ..mailbox import MAX_THREAD, mail_context
from ..store import Trigger

_ADDRESS = re.compile(r"[^@\s]+@[^@\s]+")
# The message ids the hub and sidecars derive for their own items (a child's
# start and end, an approval's decision, a timer's or a schedule's fire, mail
# a run sends, a bounce of it): a client's must not take one first, or the
# item it stands for would be answered as a retry of the client's and never stored.
_RESERVED_MESSAGE_ID = re.compile(
    r"(start|child|approval|cancel|terminate|timer|schedule|bounce):|dsp_\w+:mail:"
)
_LINE_BREAKS = re.compile(r"[\r\n\x00]")


class MailBatchIn(msgspec.Struct, kw_only=True):
    """A ``POST /mail/batch`` body: ``{"mails": [mail, ...]}``."""

    mails: list[msgspec.Raw]
    """Each decoded on its own: one malformed mail is that mail's error."""


def reserved_message_id(message_id: str | None) -> bool:
    """A message id of the kinds the hub and sidecars derive for their own items."""
    return message_id is not None and _RESERVED_MESSAGE_ID.match(message_id) is not None


def single_line(text: str) -> bool:
    """No CR, LF or NUL: safe in a mail header and a log line."""
    return _LINE_BREAKS.search(text) is None


def _b64decode(text: str) -> bytes:
    """Standard base64, or the URL-safe alphabet; padding optional; nothing else."""
    padded = text + "=" * (-len(text) % 4)
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(padded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
    raise InvalidMail("'body_b64' is not base64")


def mail_trigger(mail: IngressMail, *, max_body: int) -> Trigger:
    """Validate a mail: a decoded ``POST /mail`` body or a mail of the NATS
    ingress, which have the same fields, names and rules (``to``, ``from``,
    ``subject``, ``body`` or ``body_b64``, ``message_id``, ``in_reply_to``,
    ``references``); the caller adds the digest."""
    address = mail.to.strip().lower()
    if len(address) > 512 or not _ADDRESS.fullmatch(address) or not single_line(mail.to):
        raise InvalidMail(f"'to' is not a mail address: {mail.to[:100]!r}")
    fields = {"from": mail.sender, "subject": mail.subject, "message_id": mail.message_id}
    fields |= {"in_reply_to": mail.in_reply_to}
    fields |= {f"references[{at}]": ref for at, ref in enumerate(mail.references)}
    for field, value in fields.items():
        if value is not None and not single_line(value):
            raise InvalidMail(f"'{field}' must be one line: no CR, LF or NUL")
    threading = [mail.in_reply_to or "", *mail.references]
    if len(mail.references) > MAX_THREAD or any(len(ref) > 998 for ref in threading):
        raise InvalidMail(f"'references' (at most {MAX_THREAD}, each 998) is too long")
    if mail.body is not None and mail.body_b64 is not None:
        raise InvalidMail("give 'body' or 'body_b64', not both")
    if mail.message_id is not None and not 0 < len(mail.message_id) <= 512:
        raise InvalidMail("'message_id' must be 1 to 512 characters")
    if reserved_message_id(mail.message_id):
        raise InvalidMail(f"'message_id' {mail.message_id!r} has a prefix the hub reserves")
    if len(mail.subject) > 4096 or len(mail.sender or "") > 512:
        raise InvalidMail("'subject' (4096) or 'from' (512) is too long")
    body = _b64decode(mail.body_b64) if mail.body_b64 is not None else (mail.body or "").encode()
    if len(body) > max_body:
        raise PayloadTooLarge(f"mail body of {len(body)} bytes exceeds {max_body}")
    parsed, context = mail_context(mail.to, mail.in_reply_to, mail.references)
    return Trigger(
        address=parsed.base,
        context=context,
        kind="mail",
        message_id=mail.message_id,
        sender=mail.sender,
        subject=mail.subject,
        body=body,
    )
