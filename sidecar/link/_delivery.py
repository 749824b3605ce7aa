"""Delivery: ``mail.inbound.<dep>`` frames into the inbox, then their Acks.

The subscription's pump decodes each message: a control frame (Ping,
Fenced, LoadVersion) goes to the control task (``_control.py``), anything
else into a bounded hand-off (``_handoff.py``). One writer task takes
everything waiting there (up to ``batch_limit`` messages), persists every dispatch
they carry in one transaction, answers each message, and wakes the
scheduler. An Ack of ``stored`` or ``duplicate`` is only ever sent
after the commit, so the hub never takes a frame for delivered that a crash
could lose. A MailBatch is answered by one AckBatch once every item has its
answer; an item left unanswered (not this owner's) leaves the whole batch
unanswered, and the hub sends it again.

While the sidecar asks to sleep (``Activity.taking`` is False) the writer
stores nothing: what it finds waits at the door, unanswered, until the hub
answers the Sleep. A frame that comes then is the hub's dispatch, so the
hub refuses the Sleep ``busy``, the door opens, and the frame is stored and
answered at once (it used to be dropped, and the hub sent it again only
after its request's timeout, a second of silence). Granted, the process
stops with the frame unanswered and unstored: the hub delivers it to the
next process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from runtime import (
    Ack,
    AckBatch,
    AckResult,
    FrameDecodeError,
    FrameDecoder,
    MailBatch,
    MailInbound,
    Message,
    Reason,
    Subscription,
    TransportError,
    afailpoint,
    encode,
    tracing,
)

from .._errors import BlobError, DigestMismatch, SidecarError
from ..execution import Versions
from ..storage import Envelope, Inbox
from ._control import CONTROL_FRAMES, Control, ControlFrame
from ._handoff import Handoff
from ._session import HubLink, Session

log = logging.getLogger("mailrun.sidecar.delivery")


@dataclass(slots=True)
class _Frame:
    frame: MailInbound
    body: bytes | None
    ack: Ack | None = None
    raw: bytes | None = None


@dataclass(slots=True)
class _Answer:
    """What one message gets: an Ack for its one frame, or an AckBatch."""

    message: Message
    frames: list[_Frame]
    batched: bool = False
    refusal: Ack | None = None
    """The whole message refused (it could not be decoded)."""

    def reply(self) -> bytes | None:
        if self.refusal is not None:
            return encode(self.refusal)
        acks = [f.ack for f in self.frames if f.ack is not None]
        if len(acks) < len(self.frames):
            return None  # left for the hub to send again
        return encode(AckBatch(acks=acks) if self.batched else acks[0])


Received = tuple[Message, MailInbound | MailBatch | FrameDecodeError]
"""A message for the writer: a mail frame, or why it does not decode."""


class Delivery:
    def __init__(
        self,
        *,
        inbox: Inbox,
        link: HubLink,
        deployment_id: str,
        on_stored: Callable[[], None],
        control: Control,
        versions: Versions | None = None,
        batch_limit: int = 256,
        queue_size: int = 1024,
        session_wait: float = 1.0,
    ) -> None:
        self._inbox = inbox
        self._link = link
        self._deployment_id = deployment_id
        self._on_stored = on_stored
        self._control = control
        self._versions = versions
        self._batch_limit = batch_limit
        self._queue_size = queue_size
        self._session_wait = session_wait
        self._decoder: FrameDecoder[MailInbound | MailBatch | ControlFrame] = FrameDecoder(
            MailInbound | MailBatch | ControlFrame
        )

    async def run(self, subscription: Subscription) -> None:
        received = Handoff[Received](self._queue_size)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._writer, received)
            try:
                async for message in subscription:
                    try:
                        frame = self._decoder.decode(message.data)
                    except FrameDecodeError as exc:
                        await received.put((message, exc))
                        continue
                    if isinstance(frame, CONTROL_FRAMES):
                        self._control.offer(message, frame)
                    else:
                        await received.put((message, frame))
            finally:
                received.close()

    async def _writer(self, received: Handoff[Received]) -> None:
        while batch := await received.take(self._batch_limit):
            await self._handle(batch)

    async def _handle(self, received: list[Received]) -> None:
        activity = self._link.activity
        while not activity.taking:
            # Not counted as work while they wait: the sleeper reads an
            # Asleep given while work is in progress as crossed by a hello.
            log.info("asking to sleep: %d message(s) wait for the hub's answer", len(received))
            await activity.opened()
        with activity.busy():
            await self._store(received)

    async def _store(self, received: list[Received]) -> None:
        dead: list[tuple[str, str, bytes]] = []
        answers: list[_Answer] = []
        frames: list[_Frame] = []
        for message, frame in received:
            match frame:
                case FrameDecodeError():
                    dead.append((message.subject, f"{Reason.DECODE_ERROR}: {frame}", message.data))
                    refusal = _refusal("", Reason.DECODE_ERROR, str(frame))
                    answers.append(_Answer(message, [], refusal=refusal))
                case MailInbound():
                    answers.append(_Answer(message, [self._take(frame, frames)]))
                case MailBatch():
                    items = [self._take(item, frames) for item in frame.items]
                    answers.append(_Answer(message, items, batched=True))
        if frames:
            session = self._link.session or await self._link.wait_session(self._session_wait)
            if session is not None and any(self._foreign(f, session) for f in frames):
                # The hub stamps a session the moment it opens it: its Welcome
                # may not have been taken here yet.
                await self._link.wait_new_session(session, self._session_wait)
                session = self._link.session
            frames = self._fence(frames, session)
            await self._fetch_code(frames)
            await self._fetch_claims(frames)
        stored = [f for f in frames if f.ack is None]
        with (
            tracing.spans.receiving(received[0][0].subject, [f.frame for f in stored])
            if tracing.on
            else tracing.OFF
        ):
            fresh = await self._inbox.store(
                [Envelope.from_frame(f.frame, f.body, f.raw) for f in stored], dead
            )
        if stored:
            # Stored, not acknowledged: the hub will send these frames again.
            await afailpoint("sidecar.inbox.after_commit")
        for f, new in zip(stored, fresh, strict=True):
            result = AckResult.STORED if new else AckResult.DUPLICATE
            f.ack = Ack(dispatch_id=f.frame.dispatch_id, result=result)
        for answer in answers:
            if (reply := answer.reply()) is None:
                continue
            try:
                await answer.message.respond(reply)
            except TransportError as exc:
                # The hub retries an unanswered frame; a duplicate is harmless.
                log.warning(
                    "could not answer %s: %s", answer.frames[0].frame.dispatch_id or "a frame", exc
                )
        if any(fresh):
            self._on_stored()

    def _take(self, frame: MailInbound, frames: list[_Frame]) -> _Frame:
        """``frame`` to store if it is this deployment's, else refused."""
        taken = _Frame(frame, frame.body)
        if frame.deployment_id != self._deployment_id:
            taken.ack = _refusal(frame.dispatch_id, Reason.WRONG_DEPLOYMENT)
        else:
            frames.append(taken)
        return taken

    async def _fetch_code(self, frames: list[_Frame]) -> None:
        """Keep the sources of every version these frames name (fetched from
        the hub once per version) before any of them is stored: an envelope
        stored here always has its code here. Frames whose version cannot be
        had are refused; the hub sends them again."""
        if self._versions is None:
            return
        errors: dict[int, str] = {}  # version -> why its code cannot be had ("": here)
        for f in frames:
            version = f.frame.version
            if version > 1 and version not in errors:
                try:
                    await self._versions.ensure(version, f.frame.code, self._link.fetch_blob)
                    errors[version] = ""
                except (SidecarError, TransportError) as exc:
                    log.warning("cannot fetch the code of version %d: %s", version, exc)
                    errors[version] = str(exc)
            if errors.get(version):
                reason = Reason.BLOB_UNAVAILABLE
                f.ack = _refusal(f.frame.dispatch_id, reason, f"code of version {version}")

    def _fence(self, frames: list[_Frame], session: Session | None) -> list[_Frame]:
        """Keep the frames this instance may accept as the deployment's owner.

        Without a session, or with a frame from a newer owner epoch, the frame
        is for another instance: it stays unanswered (an answer could be taken
        for the owner's), and a newer epoch prompts a hello to learn the news.
        An older epoch is refused: the hub fences its sender's frames.
        """
        if session is None:
            log.info("no session yet: leaving %d frame(s) for the hub to resend", len(frames))
            return []
        kept: list[_Frame] = []
        for f in frames:
            epoch = f.frame.owner_epoch
            if epoch < session.owner_epoch:
                f.ack = _refusal(f.frame.dispatch_id, Reason.STALE_EPOCH)
            elif epoch > session.owner_epoch:
                self._link.rehello()
            elif self._foreign(f, session):
                # A session id is not a credential, but a frame that does not
                # carry one this process holds is not the hub's to its owner
                # (the hub stamps every MailInbound): left unanswered.
                log.warning(
                    "ignoring %s: stamped with session %r, not this process's",
                    f.frame.dispatch_id,
                    f.frame.session_id,
                )
            else:
                kept.append(f)
        return kept

    def _foreign(self, f: _Frame, session: Session) -> bool:
        """A frame of this owner's epoch stamped with a session it does not hold."""
        return f.frame.owner_epoch == session.owner_epoch and not self._link.holds(
            f.frame.session_id
        )

    async def _fetch_claims(self, frames: list[_Frame]) -> None:
        """Fetch the claim-checked body and the raw message of every new
        dispatch before it is stored; one that cannot be had is refused, and
        the hub sends it again."""
        claimed = [f for f in frames if _claims(f)]
        if not claimed:
            return
        known = await self._inbox.known([f.frame.dispatch_id for f in claimed])
        for f in claimed:
            frame, seq = f.frame, f.frame.seq
            if frame.dispatch_id in known:
                continue  # a duplicate: the body is already here
            if seq is not None and seq <= self._inbox.last_seq:
                continue  # a duplicate: done here, its row may be gone
            try:
                if frame.claim is not None and f.body is None:
                    f.body = await self._link.fetch_blob(frame.claim)
                if frame.raw is not None:
                    f.raw = await self._link.fetch_blob(frame.raw)
            except DigestMismatch as exc:
                log.warning("refusing %s: %s", frame.dispatch_id, exc)
                f.ack = _refusal(frame.dispatch_id, Reason.DIGEST_MISMATCH, str(exc))
            except SidecarError as exc:
                reason = (
                    Reason.BLOB_REFUSED if isinstance(exc, BlobError) else Reason.BLOB_UNAVAILABLE
                )
                f.ack = _refusal(frame.dispatch_id, reason, str(exc))


def _claims(f: _Frame) -> bool:
    """Whether ``f`` names a blob to fetch before it is stored."""
    return (f.frame.claim is not None and f.body is None) or f.frame.raw is not None


def _refusal(dispatch_id: str, reason: Reason, detail: str = "") -> Ack:
    return Ack(dispatch_id=dispatch_id, result=AckResult.REFUSED, reason=reason, detail=detail)
