"""A lane's sliding window: the next frames go out as soon as there is room.

Within one session a lane keeps up to ``window`` dispatches on the wire. It
loads the reserved rows past the highest seq it has sent (the cursor), sends
them as frames of up to ``frame_items`` dispatches, each request in its own
task, and one settler records the answers as they come: all that arrived
meanwhile in one transaction. A settled frame makes room, and the lane loads
again at once: a slow answer holds its own frame, never the ones behind it.
A sidecar stores frames whatever order they land in and processes its inbox
in seq order (a gap waits), so frames overtaking each other is harmless.
One rule keeps a trickle cheap (Nagle's): a load that did not fill a frame
holds the next load until it is settled, so mail accepted meanwhile goes in
one frame rather than one frame per accept (such a load's one frame is sent,
and its answer settled, by the lane's feed itself, which has nothing else to
do until it is settled). And
a settle alone loads nothing: rows become reserved by a poke (an accept, a hello, a rewind), or
were left behind by a load that took as many as it could, so a lone mail
costs one load, not one more that finds nothing.

A dispatch stays in the window from its send until its answer is settled, so
a load never sends what is already out. Rows below the cursor become
reserved again only by a failure, a redelivery or a takeover:

- a frame that fails (no answer, a refusal, a fenced settle) ends the pass:
  nothing more goes out, what is out drains and settles, and the lane backs
  off and starts a new pass from the lowest reserved seq;
- :meth:`Window.rewind` (the redelivery sweep, the census) makes the next
  load start from the lowest reserved seq too, skipping what is in flight;
- a takeover comes with a new session, which is a new pass.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from functools import partial

import anyio
import anyio.abc

from runtime import MailBatch, MailInbound, Retry, Subjects, Transport, Wakeup

from ...metrics import HubMetrics
from ...store import ReservedDispatch, Store, load_reserved
from ..sessions import Session, SessionTable
from .marks import Held, Marks
from .sending import Answers, frames_of, items, send, settle, write_held

log = logging.getLogger("mailrun.hub.dispatch")


class PassEnd(Enum):
    SESSION = "session"
    """The session is no longer the deployment's current one."""
    FAILED = "failed"
    """A frame failed: back off before the next pass."""
    NOT_LIVE = "not_live"
    """The deployment was deleted or its anchor is not live."""


@dataclass(frozen=True)
class Sending:
    store: Store
    transport: Transport
    subjects: Subjects
    sessions: SessionTable
    window: int
    frame_items: int
    request_timeout: float
    metrics: HubMetrics | None = None
    marks: Marks | None = None
    """Where acks wait for the events' transaction (None: written at once)."""


@dataclass(eq=False)
class Lane:
    """A deployment's delivery: its wakeups and how its frames fare."""

    deployment_id: str
    wake: Wakeup = field(default_factory=Wakeup)
    """Look again: set by accepts, settles, hellos, rewinds."""
    kick: Wakeup = field(default_factory=Wakeup)
    """Cut a backoff short: the sidecar is back."""
    running: bool = False
    retry: Retry = field(default_factory=Retry)
    """Rounds that failed in a row, and the delay before the next."""
    last_error: str = ""
    rewound: bool = False
    poked: bool = True
    """Rows may have been reserved since the last load: an accept, a hello,
    a rewind. A settle wakes the lane too, but makes no row reserved."""

    def poke(self) -> None:
        """New reserved rows may exist: the next look loads."""
        self.poked = True
        self.wake.set()

    def rewind(self) -> None:
        """Rows below the cursor may be reserved again: look from the lowest."""
        self.rewound = True
        self.poke()


@dataclass(eq=False)
class Window:
    """One pass of a lane: its session's frames, until that session ends or
    a frame fails."""

    sending: Sending
    lane: Lane
    session: Session
    out: dict[str, int] = field(default_factory=dict)
    """Dispatch id -> seq of every dispatch sent and not settled yet."""
    cursor: int = 0
    answers: Answers = field(default_factory=Answers)
    answered: list[str] = field(default_factory=list)
    ready: Wakeup = field(default_factory=Wakeup)
    """Answers wait for the settler."""
    error: str | None = None
    """Why the pass failed; None while it has not."""
    small: set[str] = field(default_factory=set)
    """The dispatches of a load that did not fill a frame, while they are
    out: no load until they are settled (below)."""
    held: list[Held] = field(default_factory=list)
    """Acks settled whose ``delivered`` mark waits for the events'
    transaction (``marks.py``): their dispatches stay out meanwhile."""
    more: bool = True
    """The last load may have left reserved rows behind (it took as many as
    it could), or this pass has not loaded yet."""
    draining: bool = False
    """The feed has ended: the pass waits for what is out to settle."""

    async def run(self) -> PassEnd:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._settler)
                end = await self._feed(tg)
                # Each request ends within its timeout; its answer is settled.
                self.draining = True
                while self.out:
                    await self.lane.wake.wait()
                tg.cancel_scope.cancel()
        finally:
            # Cut short (the hub stops, the lane is forgotten): marks still
            # held are dropped, as a lazy write is lost to a crash.
            if self.sending.marks is not None:
                for held in self.held:
                    self.sending.marks.reclaim(held)
        if self.error is not None:
            self.lane.last_error = self.error
        return end

    async def _feed(self, tg: anyio.abc.TaskGroup) -> PassEnd:
        sending, lane, dep = self.sending, self.lane, self.session.deployment_id
        subject = sending.subjects.inbound(dep)
        while True:
            # Wakeups from before this look are answered by it.
            lane.wake.clear()
            if self.error is not None:
                return PassEnd.FAILED
            if sending.sessions.current(dep) is not self.session:
                return PassEnd.SESSION
            room = sending.window - len(self.out)
            # A load that does not fill a frame waits for the last one that
            # did not to be settled (Nagle's rule): a trickle of mail goes in
            # one frame per round trip, not one per accept; a flood fills
            # frames, which go out as soon as there is room. A load that
            # could only find what the last one left needs a poke or rows
            # left behind: a settle alone (a lone mail's) finds nothing.
            if room > 0 and not self.small and (lane.poked or self.more):
                rows = await self._load(room)
                if rows is None:
                    return PassEnd.NOT_LIVE
                if rows:
                    frames = frames_of(self.session, rows, sending.frame_items)
                    if len(rows) < sending.frame_items:
                        self.small = {row.id for row in rows}
                        if len(frames) == 1:
                            # Nagle's rule holds every load until this frame
                            # is settled: the feed has nothing to do but wait
                            # for it, so it sends and settles it itself (a
                            # lone mail's frame costs no task, and its answer
                            # no turn of the settler and of the feed again).
                            await self._send_alone(subject, frames[0])
                            continue
                    for frame in frames:
                        tg.start_soon(self._send, subject, frame)
                    continue
                if not self.out and self.error is None:
                    # Nothing left to deliver (it may have been processed
                    # from an ack that came too late to count): nothing fails.
                    lane.retry.succeeded()
            await lane.wake.wait()

    async def _load(self, room: int) -> list[ReservedDispatch] | None:
        """Up to ``room`` reserved rows not out yet, past the cursor unless rewound."""
        if self.lane.rewound or not self.out:
            # From the lowest reserved seq: what is out is among the first
            # ``len(out) + room`` of them, and is skipped.
            self.lane.rewound = False
            limit, after = room + len(self.out), 0
        else:
            limit, after = room, self.cursor
        # Pokes from before this load are answered by it.
        self.lane.poked = False
        load = partial(
            load_reserved, deployment_id=self.session.deployment_id, limit=limit, after=after
        )
        rows = await self.sending.store.read(load)
        if rows is None:
            return None
        self.more = len(rows) >= limit
        rows = [row for row in rows if row.id not in self.out]
        for row in rows:
            self.out[row.id] = row.seq
        if rows:
            self.cursor = max(self.cursor, rows[-1].seq)
        return rows

    async def _send(self, subject: str, frame: MailInbound | MailBatch) -> None:
        self._count_frame()
        result = await send(self.sending.transport, subject, frame, self.sending.request_timeout)
        # A failure stops the pass at once; the frames out still finish.
        self.error = self.error or _why(result)
        self.answers.add(result)
        self.answered += [item.dispatch_id for item in items(frame)]
        self.ready.set()

    async def _send_alone(self, subject: str, frame: MailInbound | MailBatch) -> None:
        """The feed's own frame, sent and its answer settled on the feed's
        task: the settler is not woken, and the feed is not woken after it."""
        self._count_frame()
        result = await send(self.sending.transport, subject, frame, self.sending.request_timeout)
        self.error = self.error or _why(result)
        await self._settle(result, [item.dispatch_id for item in items(frame)])

    def _count_frame(self) -> None:
        if self.sending.metrics is not None:
            self.sending.metrics.frames.inc(self.session.deployment_id)

    async def _settler(self) -> None:
        while True:
            await self.ready.wait()
            answers, answered = self.answers, self.answered
            self.answers, self.answered = Answers(), []
            await self._settle(answers, answered)
            # Held marks come due on a timer that wakes the settler alone.
            if self.held:
                await self._marks()
            self.lane.wake.set()

    async def _settle(self, answers: Answers, answered: list[str]) -> None:
        """Record ``answers`` (of the dispatches ``answered``) and let their
        dispatches leave the window (or wait in it for their held mark).
        The settler's and the feed's may interleave at their awaits: each
        settles its own answers, and the window's state changes between
        awaits only."""
        sending, lane, dep = self.sending, self.lane, self.session.deployment_id
        if answers.acked or answers.refused:
            sending.sessions.seen(dep)
        held = None
        try:
            ok, held = await settle(
                sending.store,
                sending.sessions,
                self.session,
                answers,
                sending.marks,
                self.ready.set,
                self._written,
            )
            if ok and held is None and sending.metrics:
                sending.metrics.delivered.inc(dep, len(answers.acked))
        except Exception as exc:
            log.exception("settling answers of %s failed", dep)
            answers.failed, answers.last_error = answers.failed + 1, f"settle: {exc}"
        if answers.refused:
            log.warning("sidecar of %s refused: %s", dep, answers.refused[:5])
        why = _why(answers)
        self.error = self.error or why
        if why is None and answers.acked:
            lane.retry.succeeded()
        # A held mark keeps its dispatches out until it is written.
        kept = set(held.acked) if held is not None else ()
        for dispatch_id in answered:
            if dispatch_id not in kept:
                self.out.pop(dispatch_id, None)
        self.small.difference_update(answered)
        if held is not None:
            self.held.append(held)

    def _written(self, held: Held) -> None:
        """The events' transaction wrote ``held``: its dispatches leave the
        window at once, without a turn of the settler."""
        if held in self.held:
            self.held.remove(held)
        full = len(self.out) >= self.sending.window
        for dispatch_id in held.acked:
            self.out.pop(dispatch_id, None)
        if self.sending.metrics:
            self.sending.metrics.delivered.inc(self.session.deployment_id, len(held.acked))
        # The feed waits for room, or the pass for what is out: else nothing
        # it waits for changed (a lone mail's mark woke it to find nothing).
        if full or self.draining:
            self.lane.wake.set()

    async def _marks(self) -> None:
        """Held marks that are due and nobody took (their timer woke the
        settler): written alone now, and their dispatches leave the window."""
        sending, dep = self.sending, self.session.deployment_id
        assert sending.marks is not None  # nothing is held without
        due = [h for h in self.held if h.due and sending.marks.reclaim(h)]
        for held in due:
            self.held.remove(held)
        # The events' transaction may write others meanwhile (``_written``).
        for held in due:
            try:
                why = await write_held(sending.store, held)
            except Exception as exc:
                log.exception("writing delivered marks of %s failed", dep)
                why = f"settle: {exc}"
            if why is not None:
                self.error = self.error or why
            elif sending.metrics:
                sending.metrics.delivered.inc(dep, len(held.acked))
            for dispatch_id in held.acked:
                self.out.pop(dispatch_id, None)


def _why(answers: Answers) -> str | None:
    """Why these answers fail their frames; None when they do not."""
    if answers.failed:
        return answers.last_error or "no answer"
    if answers.refused:
        return f"refused: {answers.refused[0][1]}"
    return None
