"""What a mail says of the thread it belongs to, and the context every door
gives a mail: the recipient as written, its tag, and its thread.

A mail names the mail it answers in ``In-Reply-To`` and the thread before
that in ``References`` (RFC 5322 3.6.4), each a list of ``<id@host>``. The
thread a run sees is References then In-Reply-To, each Message-ID once,
oldest first; a reply is looked for under In-Reply-To first, then under
References from the newest back (:func:`reply_candidates`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from runtime.wire import MailContext

from .addresses import Address, parse_address

# At most 998 characters: a header line's length (RFC 5322 2.1.1).
_MESSAGE_ID = re.compile(r"<[^<>\s]{1,996}>")
MAX_THREAD = 100
"""Message-IDs of a thread kept (the newest): a References header can grow
with every answer of a long discussion."""


def message_ids(text: str | None) -> list[str]:
    """The Message-IDs a header names, in order, angle brackets kept (one
    longer than a header line may be is no Message-ID). A bare ``id@host``
    (an HTTP client's, say) is taken as ``<id@host>``."""
    if not text:
        return []
    found = _MESSAGE_ID.findall(text)
    if found:
        return list(found)
    bare = text.strip()
    wrapped = f"<{bare}>"
    return [wrapped] if _MESSAGE_ID.fullmatch(wrapped) else []


def thread_of(in_reply_to: str | None, references: Iterable[str] = ()) -> list[str]:
    """References then In-Reply-To, each once, oldest first (the newest
    :data:`MAX_THREAD` of them)."""
    thread: list[str] = []
    for header in (*references, in_reply_to):
        for message_id in message_ids(header):
            if message_id not in thread:
                thread.append(message_id)
    return thread[-MAX_THREAD:]


def reply_candidates(context: MailContext) -> list[str]:
    """The Message-IDs a reply is looked for under, in turn: In-Reply-To,
    then the thread from the newest back."""
    first = [context.in_reply_to] if context.in_reply_to else []
    return list(dict.fromkeys([*first, *reversed(context.thread)]))


def mail_context(
    to: str, in_reply_to: str | None = None, references: Iterable[str] = ()
) -> tuple[Address, MailContext]:
    """The recipient taken apart, and the context of a mail to it: ``to`` as
    written, its tag, the Message-ID it answers and its thread. Routing
    completes it (``routed_by``; a reply address's token is no tag)."""
    address = parse_address(to)
    replied = message_ids(in_reply_to)
    context = MailContext(
        to=address.written,
        tag=address.tag,
        in_reply_to=replied[0] if replied else None,
        thread=thread_of(in_reply_to, references),
    )
    return address, context
