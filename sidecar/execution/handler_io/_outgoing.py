"""What ``ctx.send`` takes, checked before it becomes a ``MailSent`` event.

A handler's mail is refused while the handler runs, with a typed error
(:class:`InvalidMail`, a ``ValueError``), for anything the hub could not
turn into a message: a recipient that is not one bare mailbox
(``name@domain``, no display name, no list), a header name or value with a
line break in it, a header the hub writes itself, an attachment that is
neither an :class:`Attachment` nor a ``(filename, data[, content_type])``
tuple. A mail too large as a whole (subject, body, html
and attachments) raises :class:`LimitExceeded`, as a too-large body did.
Either way the item commits nothing: the error fails the handler call.

The Message-ID the mail carries is made here too: ``<{dispatch}.{n}@{domain}>``,
from the dispatch and the send's index in the handler call (the same ``n``
as in the send's idempotency key), so the item processed again sends the
same mail under the same id.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from runtime import wire
from runtime.config import DEFAULT_MAIL_DOMAIN

from ..._errors import InvalidMail, LimitExceeded


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """One attachment of a mail ``ctx.send`` sends: ``data`` (text is sent
    as UTF-8), ``content_type`` guessed from ``filename`` when None."""

    filename: str
    data: bytes | str = b""
    content_type: str | None = None


HUB_HEADERS = frozenset(
    {
        "from",
        "to",
        "cc",
        "bcc",
        "sender",
        "subject",
        "date",
        "message-id",
        "reply-to",
        "in-reply-to",
        "references",
        "mime-version",
        "return-path",
        "dkim-signature",
    }
)
"""Headers ``headers=`` may not name (nor any ``Content-*``): the hub writes
them from the mail's own fields, and signs them."""

# One addr-spec without a display name, comments, quoting, control
# characters or a second address.
_MAILBOX = re.compile(r"[^\s\x00-\x1f\x7f@<>()\[\],;:\"\\]+@[^\s\x00-\x1f\x7f@<>()\[\],;:\"\\]+")
# RFC 5322 field names: printable ASCII but the colon.
_FIELD_NAME = re.compile(r"[!-9;-~]+")
_CONTENT_TYPE = re.compile(r"[!#$&^_.+\-0-9A-Za-z]+/[!#$&^_.+\-0-9A-Za-z]+")
_MSG_ID = re.compile(r"<[^\s\x00-\x1f\x7f<>]+>")


def mail_domain(address: str) -> str:
    """The domain of the deployment's address: its Message-IDs' right-hand side."""
    return address.rpartition("@")[2] or DEFAULT_MAIL_DOMAIN


def header_id(dispatch_id: str, n: int, domain: str) -> str:
    """The Message-ID of the ``n``-th mail a handler call sends for ``dispatch_id``."""
    return f"<{dispatch_id}.{n}@{domain or DEFAULT_MAIL_DOMAIN}>"


def mailbox(value: object, what: str) -> str:
    if not isinstance(value, str) or _MAILBOX.fullmatch(value) is None:
        raise InvalidMail(f"{what} is one address (name@domain), not {value!r}")
    return value


def mailboxes(values: str | Iterable[str], what: str) -> list[str]:
    """One address, or several; a string is one address, never its letters."""
    items = [values] if isinstance(values, str) else list(values)
    return [mailbox(v, what) for v in items]


def message_id(value: object, what: str) -> str:
    """A Message-ID as a header writes it; one without its angle brackets gets them."""
    if isinstance(value, str) and value and not value.startswith("<"):
        value = f"<{value}>"
    if not isinstance(value, str) or _MSG_ID.fullmatch(value) is None:
        raise InvalidMail(f"{what} is a Message-ID (<id@domain>), not {value!r}")
    return value


def message_ids(values: str | Iterable[str], what: str) -> list[str]:
    items = [values] if isinstance(values, str) else list(values)
    return [message_id(v, what) for v in items]


def extra_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """``headers=``: names a header may have, values on one line, each name once."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidMail(f"headers= is a mapping of name to value, not {headers!r}")
    seen: set[str] = set()
    kept: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or _FIELD_NAME.fullmatch(name) is None:
            raise InvalidMail(f"{name!r} is not a header name")
        folded = name.lower()
        if folded in HUB_HEADERS or folded.startswith("content-"):
            raise InvalidMail(f"header {name!r} is written by the hub: give it as send()'s own")
        if folded in seen:
            raise InvalidMail(f"header {name!r} is given twice")
        seen.add(folded)
        kept[name] = one_line(value, f"header {name!r}")
    return kept


def one_line(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidMail(f"{what} is a string, not {type(value).__name__}")
    if "\r" in value or "\n" in value or "\0" in value:
        raise InvalidMail(f"{what} has a line break in it")
    return value


def attachments_of(values: Iterable[Any]) -> list[wire.Attachment]:
    """``attachments=``: each an Attachment (this module's or the wire's) or
    ``(filename, data[, content_type])``."""
    if isinstance(values, Attachment | wire.Attachment):
        values = [values]
    return [_attachment(v) for v in values]


def _attachment(value: Any) -> wire.Attachment:
    content_type: Any
    if isinstance(value, Attachment | wire.Attachment):
        filename, data, content_type = value.filename, value.data, value.content_type
    elif isinstance(value, tuple) and len(value) in (2, 3):
        filename, data = value[0], value[1]
        content_type = value[2] if len(value) == 3 else None
    else:
        raise InvalidMail(
            f"an attachment is an Attachment or (filename, data[, content_type]), not {value!r}"
        )
    name = one_line(filename, "an attachment's filename")
    if not name:
        raise InvalidMail("an attachment needs a filename")
    if isinstance(data, str):
        data = data.encode("utf-8")
    elif isinstance(data, bytes | bytearray | memoryview):
        data = bytes(data)
    else:
        raise InvalidMail(f"attachment {name!r}: its data is bytes, not {type(data).__name__}")
    if content_type is None:
        content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if not isinstance(content_type, str) or _CONTENT_TYPE.fullmatch(content_type) is None:
        raise InvalidMail(f"attachment {name!r}: {content_type!r} is not a content type")
    return wire.Attachment(filename=name, content_type=content_type, data=data)


def checked_mail(
    to: object,
    subject: object,
    body: bytes | str,
    *,
    html: object,
    cc: str | Iterable[str],
    reply_to: object,
    in_reply_to: object,
    references: str | Iterable[str],
    headers: Mapping[str, str] | None,
    attachments: Iterable[Any],
) -> dict[str, Any]:
    """``ctx.send``'s arguments checked, as the ``MailSent`` fields they
    make. Raises :class:`InvalidMail`, or :class:`LimitExceeded` for a mail
    over ``MAX_MAIL`` as a whole."""
    if not isinstance(to, str) or not to:
        raise InvalidMail("send() needs a recipient address")
    if html is not None and not isinstance(html, str):
        raise InvalidMail(f"html= is a string, not {type(html).__name__}")
    title = one_line(subject, "the subject")
    data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    files = attachments_of(attachments)
    _check_size(title, data, html, files)
    return {
        "to": mailbox(to, "the recipient"),
        "subject": title,
        "body": data,
        "html": html,
        "cc": mailboxes(cc, "a cc address"),
        "reply_to": None if reply_to is None else mailbox(reply_to, "reply_to"),
        "in_reply_to": None if in_reply_to is None else message_id(in_reply_to, "in_reply_to"),
        "references": message_ids(references, "a reference"),
        "headers": extra_headers(headers),
        "attachments": files,
    }


def _check_size(subject: str, body: bytes, html: str | None, files: list[wire.Attachment]) -> None:
    value: Any = (subject, body)
    what = "the mail's subject and body"
    if html is not None or files:
        value = (subject, body, html, [a.data for a in files])
        what = "the mail (subject, body, html, files)"
    size = wire.encoded_size(value)
    if size > wire.MAX_MAIL.bytes:
        raise LimitExceeded(what, size, wire.MAX_MAIL)
