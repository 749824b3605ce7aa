"""Serving requests on one subscription: bounded, every request answered.

The wire side's subjects and the mail ingress serve alike: a request whose
sender the subject names (``<subject>.<id>``, an id only that identity may
publish under) is served only if its reply goes to that sender's own inbox,
at most ``limit`` requests at once; a frame that does not decode is kept as a
dead letter and answered ``decode_error``, a HubError is answered as its
Refused, anything else as ``internal_error`` (logged), never a crash. Each
request is answered in a task of the subscription's group, kept for the
next request once done (``runtime.loops.Workers``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import anyio
import msgspec

from runtime import (
    FrameDecodeError,
    Message,
    Reason,
    Refused,
    Subjects,
    Subscription,
    TransportError,
    encode,
    is_id,
)
from runtime.loops import Workers

from ..._errors import HubError
from ..retention import Garbage

log = logging.getLogger("mailrun.hub.wire")

KEEP = 16
"""Tasks at most kept waiting for the next request, per subscription."""

Handler = Callable[[bytes, str | None], Awaitable[msgspec.Struct]]
"""A request's data and its sender (None on a shared subject) to its answer."""


async def serve(
    garbage: Garbage,
    sub: Subscription,
    source: str,
    handler: Handler,
    limit: int,
    sender_kind: str | None,
    serves: Callable[[str], bool] | None = None,
) -> None:
    """Serve ``sub`` until it ends. ``sender_kind``: the id prefix (``dep``,
    ``prd``) of the sender the subject's last token names; None on a shared
    subject, whose requests have no sender. With ``serves``, a request of a
    sender it refuses is left unanswered: another hub serves that sender."""
    # A free slot is taken without a turn of the loop: the subscription
    # gives the turns, and the answer runs in a task of its own anyway. A
    # bare asyncio semaphore (the hub runs on anyio's asyncio backend): a
    # free one is taken without anyio's look up the task's cancel scopes.
    slots = asyncio.Semaphore(limit)
    async with anyio.create_task_group() as tg:
        # Tasks kept for the next request: a task spawned per request was a
        # lone mail's largest single cost here (runtime.loops.Workers).
        workers = Workers(tg, keep=min(limit, KEEP))
        async for message in sub:
            sender: str | None = None
            if sender_kind is not None:
                sender = _sender(message, sender_kind)
                if sender is None or (serves is not None and not serves(sender)):
                    continue
            await slots.acquire()
            workers.start_soon(_answer, garbage, message, source, handler, sender, slots)
        workers.close()  # the answers under way finish, then the group
    log.info("subscription %s ended", sub.subject)


def _sender(message: Message, kind: str) -> str | None:
    """The sender a request came from, or None to drop it.

    The server checks who publishes on a subject, not the reply subject a
    publisher names: answered anywhere else than the sender's own inbox, a
    request could make the hub publish on a subject its sender may not
    (another deployment's inbound subject, say). So such a request is
    neither served nor answered."""
    sender = message.subject.rpartition(".")[2]
    if is_id(sender, kind) and (message.reply or "").startswith(
        f"{Subjects.inbox_prefix(sender)}."
    ):
        return sender
    log.warning(
        "dropped a request on %s: its reply subject %r is not its sender's inbox",
        message.subject,
        message.reply,
    )
    return None


async def _answer(
    garbage: Garbage,
    message: Message,
    source: str,
    handler: Handler,
    sender: str | None,
    slots: asyncio.Semaphore,
) -> None:
    try:
        reply = await _handle(garbage, message, source, handler, sender)
        try:
            await message.respond(encode(reply))
        except TransportError as exc:
            log.warning("cannot answer %s request: %s", source, exc)
    finally:
        slots.release()


async def _handle(
    garbage: Garbage, message: Message, source: str, handler: Handler, sender: str | None
) -> msgspec.Struct:
    try:
        return await handler(message.data, sender)
    except FrameDecodeError as exc:
        log.warning("undecodable %s frame on %s: %s", source, message.subject, exc)
        await garbage.keep(source, message, sender, f"{Reason.DECODE_ERROR}: {exc}")
        return Refused(reason=Reason.DECODE_ERROR, detail=str(exc))
    except HubError as exc:
        return Refused(reason=exc.reason, detail=exc.detail)
    except Exception as exc:
        log.exception("%s request failed", source)
        return Refused(reason=Reason.INTERNAL_ERROR, detail=type(exc).__name__)
