"""A message as it came over SMTP -> the fields of a mail trigger.

The stdlib ``email`` package with ``email.policy.default`` does the reading:
it decodes RFC 2047 encoded words in headers and takes a header's folding
apart. What reaches the trigger:

- ``sender``: the first address of the ``From`` header (``user@host``, no
  display name), else the envelope's ``MAIL FROM``;
- ``subject``: the ``Subject`` header, decoded, on one line;
- ``message_id``: the ``Message-ID`` header as written (angle brackets
  kept), on one line; None when there is none;
- ``in_reply_to`` and ``references``: the Message-IDs those headers name
  (``<id@host>`` each), by which a reply finds the run it answers;
- ``text``: the first ``text/plain`` part (what ``get_body`` picks: it looks
  inside ``multipart/alternative`` and skips attachments), else the first
  ``text/html`` part's source, decoded by its transfer encoding and charset;
  "" when the message has neither. Line ends become ``\\n``.

The raw message itself goes with the trigger as it is, for ``item.raw``.
"""

from __future__ import annotations

import email.policy
import re
from dataclasses import dataclass
from email.message import EmailMessage, Message
from email.parser import BytesParser

from ..mailbox import MAX_THREAD, message_ids

# A header folded over lines, and anything else a header must not carry on
# into a one-line field (the trigger's validation refuses CR, LF and NUL).
_BREAKS = re.compile(r"[ \t]*[\r\n\x00]+[ \t]*")
_PARSER = BytesParser(policy=email.policy.default)


@dataclass(frozen=True)
class ParsedMail:
    sender: str | None
    subject: str
    message_id: str | None
    text: str
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()


def one_line(value: str) -> str:
    """A header value unfolded onto one line, as valid text."""
    return _valid_text(_BREAKS.sub(" ", value)).strip()


def _valid_text(value: str) -> str:
    # A raw 8-bit header comes back with surrogate escapes, which no store
    # column and no JSON takes: read those bytes as UTF-8, else replace them.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raw = value.encode("utf-8", "surrogateescape" if _escaped(value) else "replace")
        return raw.decode("utf-8", "replace")
    return value


def _escaped(value: str) -> bool:
    """Only surrogates that ``surrogateescape`` makes (U+DC80..U+DCFF)."""
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in value)


def _header(message: Message, name: str) -> str | None:
    try:
        value = message.get(name)
    except Exception:  # hostile input: email's header parsers raise a variety
        return None  # a header policy.default cannot read at all: as if absent
    return None if value is None else one_line(str(value))


def _sender(message: Message, mail_from: str | None) -> str | None:
    try:
        header = message.get("From")
        addresses = getattr(header, "addresses", ()) if header is not None else ()
    except Exception:  # as in _header
        addresses = ()
    for address in addresses:
        # A malformed From parses to an address without a domain: not a sender.
        if address.username and address.domain:
            return one_line(address.addr_spec)
    # "<>" is the null sender (a bounce): no one to name.
    return one_line(mail_from) if mail_from and mail_from != "<>" else None


def _decoded(part: Message) -> str:
    payload = part.get_payload(decode=True)  # undoes base64 / quoted-printable
    if not isinstance(payload, bytes):
        return ""
    # No charset said: UTF-8, which reads US-ASCII the same and is what an
    # undeclared 8-bit body nearly always is.
    charset = part.get_content_charset() or "utf-8"
    try:
        text = payload.decode(charset, "replace")
    except LookupError:  # a charset Python does not know
        text = payload.decode("utf-8", "replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _text(message: EmailMessage) -> str:
    for kind in ("plain", "html"):
        try:
            part = message.get_body(preferencelist=(kind,))
        except Exception:  # as in _header: a part whose headers cannot be read
            part = None
        if part is not None:
            return _decoded(part)
    return ""


def parse_message(raw: bytes, mail_from: str | None = None) -> ParsedMail:
    """The trigger's fields of the message ``raw`` (as DATA brought it),
    ``mail_from`` being the envelope sender. Never raises on malformed
    input: what cannot be read is left out, as ``email`` itself does."""
    message = _PARSER.parsebytes(raw)
    assert isinstance(message, EmailMessage)  # what policy.default makes
    message_id = _header(message, "Message-ID")
    replied = message_ids(_header(message, "In-Reply-To"))
    return ParsedMail(
        in_reply_to=replied[0] if replied else None,
        references=tuple(message_ids(_header(message, "References"))[-MAX_THREAD:]),
        sender=_sender(message, mail_from),
        subject=_header(message, "Subject") or "",
        message_id=message_id or None,
        text=_text(message),
    )
