"""The message an outbound row becomes, built with the standard library's
``email`` package: the same bytes on every attempt.

Its shape (docs/smtp.md, "Outbound mail"): text only is ``text/plain``;
with html, ``multipart/alternative`` (the text first); with attachments,
``multipart/mixed`` around that, each attachment with its content type and
file name. Headers: From (the deployment's address), To, Cc, Subject, Date
(the row's ``created_at``), Message-ID (the row's), Reply-To (the one given,
else the run's signed reply address), In-Reply-To and References as given,
then the mail's own headers in their order. A subject, a display name or a
header value that is not ASCII is RFC 2047 encoded; an address that is not
ASCII makes the whole message SMTPUTF8 (UTF-8 headers, sent only to a relay
that offers SMTPUTF8). Bodies are 7bit on the wire (quoted-printable or
base64 as the ``email`` package picks), so no relay needs 8BITMIME; the
multipart boundaries are made from the mail, not at random.
"""

from __future__ import annotations

import email.policy
import email.utils
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage

from ..store import DueMail, OutboundSpec, decode_spec, one_mailbox

# CRLF line ends, headers folded for the wire; bodies transfer-encoded to 7 bits.
_ASCII = email.policy.SMTP.clone(cte_type="7bit")
_UTF8 = email.policy.SMTPUTF8.clone(cte_type="7bit")


@dataclass(frozen=True)
class Built:
    """A message ready for the relay: its bytes, the envelope recipients (To,
    then each Cc, once each), whether it needs SMTPUTF8, and the From's domain
    (which DKIM key signs it)."""

    data: bytes
    recipients: tuple[str, ...]
    smtputf8: bool
    from_domain: str


def envelope_recipients(mail: DueMail, spec: OutboundSpec) -> tuple[str, ...]:
    """To and every Cc, bare, each address once (compared case-insensitively)."""
    seen: dict[str, str] = {}
    for written in (mail.recipient, *spec.cc):
        address = one_mailbox(written)[1]
        seen.setdefault(address.lower(), address)
    return tuple(seen.values())


def _not_ascii(texts: Sequence[str]) -> bool:
    return any(not text.isascii() for text in texts)


def build_message(mail: DueMail, reply_address: str | None) -> Built:
    """The message of ``mail``; ``reply_address`` is its Reply-To when the run
    gave none (None: no Reply-To). Raises ``ValueError`` or ``TypeError`` for
    a mail that cannot be a message (kept ``failed``, never sent)."""
    spec = decode_spec(mail.spec)
    recipients = envelope_recipients(mail, spec)
    smtputf8 = _not_ascii([mail.sender, *recipients])
    message = EmailMessage(policy=_UTF8 if smtputf8 else _ASCII)
    message["From"] = mail.sender
    message["To"] = mail.recipient
    if spec.cc:
        message["Cc"] = ", ".join(spec.cc)
    message["Subject"] = mail.subject
    message["Date"] = email.utils.formatdate(mail.created_at, localtime=False)
    message["Message-ID"] = mail.message_id
    reply_to = spec.reply_to if spec.reply_to is not None else reply_address
    if reply_to:
        message["Reply-To"] = reply_to
    if spec.in_reply_to is not None:
        message["In-Reply-To"] = spec.in_reply_to
    if spec.references:
        message["References"] = " ".join(spec.references)
    for name, value in spec.headers.items():
        message[name] = value
    _set_body(message, mail.body, spec)
    _fix_boundaries(message, mail)
    data = message.as_bytes()
    return Built(data, recipients, smtputf8, mail.sender.rpartition("@")[2].lower())


def _fix_boundaries(message: EmailMessage, mail: DueMail) -> None:
    """Boundaries made from the mail (the ``email`` package's are random): the
    same on every attempt, and never in the parts they separate, which would
    have to hold a hash of themselves."""
    digest = hashlib.sha256(b"\0".join([mail.id.encode(), mail.body, mail.spec or b""]))
    stem = digest.hexdigest()[:40]
    for index, part in enumerate(message.walk()):
        if part.is_multipart():
            part.set_boundary(f"=_{stem}.{index}")


def _set_body(message: EmailMessage, body: bytes, spec: OutboundSpec) -> None:
    try:
        message.set_content(body.decode("utf-8"))
    except UnicodeDecodeError:
        # Not text: the bytes as they are, for the receiver to make sense of.
        message.set_content(body, maintype="application", subtype="octet-stream")
    if spec.html is not None:
        message.add_alternative(spec.html, subtype="html")
    for attachment in spec.attachments:
        maintype, _, subtype = attachment.content_type.partition("/")
        message.add_attachment(
            attachment.data,
            maintype=maintype.lower(),
            subtype=subtype.lower(),
            filename=attachment.filename,
        )
