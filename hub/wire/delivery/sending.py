"""The steps of delivery: load reserved dispatches, frame them, send, settle.

Rows are loaded in ``seq`` order (the store's ``load_reserved``), framed,
sent as requests, and their answers settled in one write transaction
(``record_answers``): acknowledged ones become ``delivered``, refused ones
keep their reason. Nothing else changes a row, so whatever was not
acknowledged is simply loaded again: the table is the only queue.
:mod:`hub.wire.delivery.window` decides when each step runs.

A sidecar that takes them (format 3) gets MailBatch frames of up to
``MAX_FRAME_BYTES`` and ``max_items`` dispatches each, answered by one
AckBatch apiece: one request and one answer for what was one each per
dispatch. An older sidecar gets one MailInbound request per dispatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import msgspec

from runtime import (
    MAX_FRAME_BYTES,
    Ack,
    AckBatch,
    AckResult,
    Claim,
    FrameDecodeError,
    FrameDecoder,
    MailBatch,
    MailInbound,
    Reason,
    Refused,
    Transport,
    TransportError,
    afailpoint,
    encode,
    tracing,
)
from runtime.wire import MailContext

from ..._errors import LeaseLost, StaleEpoch
from ...store import ReservedDispatch, Store, record_answers
from ..sessions import Session, SessionTable
from .marks import Held, Marks

_context = msgspec.msgpack.Decoder(MailContext)
_acks: FrameDecoder[Ack | Refused] = FrameDecoder(Ack | Refused)
_batch_acks: FrameDecoder[AckBatch | Ack | Refused] = FrameDecoder(AckBatch | Ack | Refused)


@dataclass
class Answers:
    """What frames' answers say, to settle together."""

    acked: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (dispatch id, reason)
    failed: int = 0
    """Frames without a usable answer (timeout, no responders, garbage, fenced)."""
    last_error: str = ""

    def count(self, frame: MailInbound, reply: Ack | Refused) -> None:
        """One dispatch's answer."""
        if isinstance(reply, Refused):
            self.refused.append((frame.dispatch_id, reply.reason))
        elif reply.dispatch_id != frame.dispatch_id:
            self.refused.append((frame.dispatch_id, Reason.ACK_MISMATCH))
        elif _accepts(reply):
            self.acked.append(frame.dispatch_id)
        else:
            self.refused.append((frame.dispatch_id, _refusal(reply)))

    def add(self, other: Answers) -> None:
        self.acked += other.acked
        self.refused += other.refused
        self.failed += other.failed
        self.last_error = other.last_error or self.last_error


def inbound_frame(session: Session, row: ReservedDispatch) -> MailInbound:
    claim = None
    if row.body_digest is not None:
        claim = Claim(digest=row.body_digest, size=row.body_size)
    return MailInbound(
        dispatch_id=row.id,
        deployment_id=session.deployment_id,
        run_id=row.run_id,
        address=row.address,
        seq=row.seq,
        kind=row.kind,
        message_id=row.message_id,
        sender=row.sender,
        subject=row.subject,
        body=None if claim is not None else bytes(row.body or b""),
        claim=claim,
        start_request_id=row.start_request_id,
        owner_epoch=session.owner_epoch,
        session_id=session.session_id,
        version=row.version,
        # Version 1 is the restore record's code: every sidecar has it.
        code=Claim(digest=row.code_digest, size=row.code_size or 0)
        if row.version > 1 and row.code_digest is not None
        else None,
        raw=Claim(digest=row.raw_digest, size=row.raw_size or 0)
        if row.raw_digest is not None
        else None,
        context=None if row.context is None else _context.decode(row.context),
    )


def frames_of(
    session: Session, rows: list[ReservedDispatch], max_items: int
) -> list[MailInbound | MailBatch]:
    """The requests that carry ``rows``: batches if the session's sidecar
    takes them, else one MailInbound each."""
    frames = [inbound_frame(session, row) for row in rows]
    if not session.batches:
        return list(frames)
    return list(batches(frames, max_items))


def items(frame: MailInbound | MailBatch) -> list[MailInbound]:
    return frame.items if isinstance(frame, MailBatch) else [frame]


async def send(
    transport: Transport, subject: str, frame: MailInbound | MailBatch, timeout: float
) -> Answers:
    """One request, and what its answer says of each dispatch it carries."""
    result = Answers()
    # The dispatches are committed (reserved) but not on the wire yet.
    await afailpoint("hub.dispatch.before_publish")
    try:
        with tracing.spans.sending(subject, items(frame)) if tracing.on else tracing.OFF:
            data = await transport.request(subject, encode(frame), timeout)
        # The sidecar has answered; the hub has not counted the answer yet.
        await afailpoint("hub.dispatch.after_publish")
        reply = (_batch_acks if isinstance(frame, MailBatch) else _acks).decode(data)
    except (TimeoutError, TransportError, FrameDecodeError) as exc:
        result.failed += 1
        result.last_error = f"{type(exc).__name__}: {exc}"
        return result
    sent = items(frame)
    if isinstance(reply, AckBatch):
        if isinstance(frame, MailBatch) and len(reply.acks) == len(sent):
            for item, ack in zip(sent, reply.acks, strict=True):
                result.count(item, ack)
        else:  # an answer that is not to this frame
            result.refused += [(item.dispatch_id, Reason.ACK_MISMATCH) for item in sent]
    elif isinstance(frame, MailInbound):
        result.count(frame, reply)
    elif not _accepts(reply):
        # The whole batch refused (a decode error, say): each for that reason.
        reason = reply.reason if isinstance(reply, Refused) else _refusal(reply)
        result.refused += [(item.dispatch_id, reason) for item in sent]
    else:  # one Ack for a whole batch: not an answer to it
        result.refused += [(item.dispatch_id, Reason.ACK_MISMATCH) for item in sent]
    return result


def batches(frames: list[MailInbound], max_items: int = 2**31) -> list[MailBatch]:
    """``frames`` in order, as MailBatch frames of at most ``max_items`` and
    ``MAX_FRAME_BYTES`` (one frame larger than that alone: it is within NATS'
    payload anyway)."""
    out: list[MailBatch] = []
    size = 0
    for frame in frames:
        length = len(encode(frame))
        if not out or size + length > MAX_FRAME_BYTES or len(out[-1].items) >= max_items:
            out.append(MailBatch(items=[]))
            size = 0
        out[-1].items.append(frame)
        size += length
    return out


def _accepts(reply: Ack | Refused) -> bool:
    return isinstance(reply, Ack) and reply.result in (AckResult.STORED, AckResult.DUPLICATE)


def _refusal(ack: Ack) -> str:
    """A refusing Ack as ``last_error`` keeps it: the code, then the prose.

    This is the text an older sidecar wrote into ``reason`` alone
    (``"digest_mismatch: <why>"``), so both read the same at the hub."""
    reason = ack.reason or AckResult.REFUSED
    return f"{reason}: {ack.detail}" if ack.detail else reason


async def settle(
    store: Store,
    sessions: SessionTable,
    session: Session,
    result: Answers,
    marks: Marks | None = None,
    wake: Callable[[], None] = lambda: None,
    done: Callable[[Held], None] = lambda held: None,
) -> tuple[bool, Held | None]:
    """Record answers in one transaction, under the epoch they were sent in
    and while this hub serves the deployment; False when the epoch moved (or
    the lease) meanwhile and nothing was recorded. With ``marks``, the acks
    of answers without a refusal are held for the events' transaction instead
    (the :class:`Held` returned, ``done`` called when it is written, ``wake``
    when it is given back: ``marks.py``); refusals are rare, and written with their acks at once."""
    if not result.acked and not result.refused:
        return True, None
    # Acks are in, none recorded: a crash here redelivers them all.
    await afailpoint("hub.dispatch.before_settle")
    fence = sessions.fence(session.deployment_id, session.owner_epoch)
    if marks is not None and not result.refused:
        return True, marks.hold(fence, result.acked, time.time(), wake, done)
    try:
        # Not durable: a mark lost to a power failure is a dispatch sent
        # again, which the sidecar answers "duplicate". Waiting for the disk
        # here held the write lock that accepts wait on.
        await store.transact(
            partial(
                record_answers,
                fence=fence,
                acked=result.acked,
                refused=result.refused,
                now=time.time(),
            ),
            durable=False,
        )
    except (StaleEpoch, LeaseLost) as exc:
        result.failed += len(result.acked)
        result.last_error = _fenced(exc)
        return False, None
    return True, None


async def write_held(store: Store, held: Held) -> str | None:
    """A held mark nobody took in time, written alone (lazily, as a settle's);
    why it was not (the epoch or the lease moved), or None."""
    try:
        await store.transact(
            partial(record_answers, fence=held.fence, acked=held.acked, refused=(), now=held.at),
            durable=False,
        )
    except (StaleEpoch, LeaseLost) as exc:
        return _fenced(exc)
    return None


def _fenced(exc: StaleEpoch | LeaseLost) -> str:
    if isinstance(exc, StaleEpoch):
        return "ownership moved while the frames were out"
    return "another hub serves the deployment now"
