"""The actor kernel: bounded mailboxes, tell/ask, supervision with a budget.

An actor handles one message at a time from a bounded mailbox (``_mailbox``),
so a slow actor pushes back on its senders instead of growing a queue. A
supervisor owns every actor's task in one task group; a crash restarts the
actor with backoff, and a crash loop past the restart budget makes the actor
give up visibly instead of spinning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc

from ..errors import ActorStopped, AskTimeout, MailboxFull
from ..loops import Backoff, Retry, StackedContext
from ._deadlines import Deadlines
from ._mailbox import Mailbox

log = logging.getLogger("mailrun.actor")

M = TypeVar("M")
GiveUp = Callable[[str, BaseException], Awaitable[None]]


class Actor(Generic[M]):
    """Subclass and override :meth:`receive`; one instance per (re)start."""

    async def started(self) -> None:
        """Runs after every (re)start, before the next message."""

    async def receive(self, message: M) -> object:
        """Handle one message; the return value answers an ``ask``."""
        raise NotImplementedError

    async def stopped(self) -> None:
        """Runs once on an orderly stop (not after a crash or give-up)."""


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5
    """More crashes than this within ``window`` seconds and the actor gives up."""
    window: float = 60.0
    backoff: Backoff = Backoff(0.05, 2.0)
    """The delay before a restart, doubling per consecutive crash."""


def _answer(
    reply: asyncio.Future[object], value: object = None, error: BaseException | None = None
) -> None:
    """The first answer stands (an ask that timed out, or whose asker was
    cancelled, stays so)."""
    if reply.done():
        return
    if error is not None:
        reply.set_exception(error)
    else:
        reply.set_result(value)


@dataclass(slots=True)
class _Envelope(Generic[M]):
    message: M
    reply: asyncio.Future[object] | None


class ActorRef(Generic[M]):
    """The only handle to an actor: send to it, ask it, stop it."""

    def __init__(self, name: str, mailbox: Mailbox[_Envelope[M]]) -> None:
        self.name = name
        self._mailbox = mailbox
        self._finished = anyio.Event()
        self._deadlines = Deadlines(self._timed_out)

    @property
    def alive(self) -> bool:
        return not self._finished.is_set()

    async def tell(self, message: M) -> None:
        """Queue ``message``; waits while the mailbox is full (backpressure)."""
        try:
            await self._mailbox.send(_Envelope(message, None))
        except anyio.ClosedResourceError:
            raise ActorStopped(f"actor {self.name} is stopped") from None

    def tell_nowait(self, message: M) -> None:
        """Queue ``message`` or raise :class:`MailboxFull` at once."""
        try:
            self._mailbox.send_nowait(_Envelope(message, None))
        except anyio.WouldBlock:
            raise MailboxFull(f"mailbox of {self.name} is full") from None
        except anyio.ClosedResourceError:
            raise ActorStopped(f"actor {self.name} is stopped") from None

    async def ask(self, message: M, *, timeout: float) -> Any:
        """Send ``message`` and wait for the answer, or raise :class:`AskTimeout`.

        The timeout covers waiting for mailbox room too. An exception raised
        by the actor's ``receive`` is raised here.
        """
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[object] = loop.create_future()
        envelope = _Envelope(message, reply)
        try:
            self._mailbox.send_nowait(envelope)
        except anyio.WouldBlock:
            return await self._ask_when_there_is_room(envelope, reply, timeout)
        except anyio.ClosedResourceError:
            raise ActorStopped(f"actor {self.name} is stopped") from None
        # A shared timer (_deadlines), not a cancel scope or a timer per ask:
        # entering and leaving a scope cost a third of an ask, arming and
        # cancelling a timer a sixth (bench/parts/actor_kernel.py). A cancelled
        # asker's task cancels the future it waits on; the actor's answer,
        # when it comes, is dropped.
        self._deadlines.add(loop, reply, timeout)
        try:
            return await reply
        finally:
            self._deadlines.discard(reply)

    def ask_nowait(self, message: M, *, timeout: float) -> asyncio.Future[Any]:
        """Send ``message`` now; the future of its answer, for an asker that
        takes it in a callback rather than in a task waiting for it (a task
        and two of its turns less an ask).

        The future holds what :meth:`ask` would return, or raise: the
        actor's error, :class:`ActorStopped`, or :class:`AskTimeout` past
        ``timeout``. Raises :class:`MailboxFull` at once when the mailbox
        has no room, :class:`ActorStopped` when the actor is stopped.
        """
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[object] = loop.create_future()
        try:
            self._mailbox.send_nowait(_Envelope(message, reply))
        except anyio.WouldBlock:
            raise MailboxFull(f"mailbox of {self.name} is full") from None
        except anyio.ClosedResourceError:
            raise ActorStopped(f"actor {self.name} is stopped") from None
        # Answered, it leaves the deadlines at the next ask or when the
        # timer fires: no callback to take it off sooner.
        self._deadlines.add(loop, reply, timeout)
        return reply

    def _timed_out(self, timeout: float) -> AskTimeout:
        return AskTimeout(f"{self.name} did not answer within {timeout}s")

    async def _ask_when_there_is_room(
        self, envelope: _Envelope[M], reply: asyncio.Future[object], timeout: float
    ) -> object:
        with anyio.move_on_after(timeout):
            try:
                await self._mailbox.send(envelope)
            except anyio.ClosedResourceError:
                raise ActorStopped(f"actor {self.name} is stopped") from None
            return await reply
        raise self._timed_out(timeout)

    async def stop(self) -> None:
        """Close the mailbox; the actor handles what is queued, then stops."""
        self._mailbox.close()
        await self._finished.wait()


class Supervisor(StackedContext):
    """Owns a task group of actors (an async context manager).

    Leaving the context normally stops every actor in order (each finishes
    what its mailbox holds, within ``stop_grace`` seconds); leaving it with
    an exception cancels them.
    """

    def __init__(self, *, on_give_up: GiveUp | None = None, stop_grace: float = 5.0) -> None:
        self._on_give_up = on_give_up
        self._stop_grace = stop_grace
        self._refs: dict[str, ActorRef[Any]] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    async def _open(self, stack: AsyncExitStack) -> None:
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        # Runs first on the way out, before the task group waits for the actors.
        stack.push_async_exit(self._stop)

    async def _stop(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.aclose()
        elif self._tg is not None:
            self._tg.cancel_scope.cancel()

    def get(self, name: str) -> ActorRef[Any] | None:
        return self._refs.get(name)

    async def spawn(
        self,
        factory: Callable[[], Actor[M]],
        *,
        name: str,
        mailbox_size: int = 64,
        policy: RestartPolicy | None = None,
    ) -> ActorRef[M]:
        if self._tg is None:
            raise RuntimeError("Supervisor must be entered before spawning")
        if name in self._refs:
            raise ValueError(f"an actor named {name!r} is already running")
        mailbox: Mailbox[_Envelope[M]] = Mailbox(mailbox_size)
        ref = ActorRef(name, mailbox)
        self._refs[name] = ref
        self._tg.start_soon(self._run, ref, factory, mailbox, policy or RestartPolicy())
        return ref

    async def stop_all(self) -> None:
        """Stop every actor now running (each finishes what it holds); the
        supervisor stays open, and ``spawn`` starts fresh ones."""
        for ref in list(self._refs.values()):
            await ref.stop()

    async def aclose(self) -> None:
        """Stop every actor; cancel those still busy after the grace period."""
        refs = list(self._refs.values())
        for ref in refs:
            ref._mailbox.close()
        with anyio.move_on_after(self._stop_grace) as scope:
            for ref in refs:
                await ref._finished.wait()
        if scope.cancelled_caught and self._tg is not None:
            log.warning("actors still busy after %.1fs; cancelling them", self._stop_grace)
            self._tg.cancel_scope.cancel()

    async def _run(
        self,
        ref: ActorRef[M],
        factory: Callable[[], Actor[M]],
        mailbox: Mailbox[_Envelope[M]],
        policy: RestartPolicy,
    ) -> None:
        crashes: deque[float] = deque()
        streak = Retry(policy.backoff)  # crashes in a row
        actor: Actor[M] | None = None
        envelope: _Envelope[M] | None = None  # the one being handled
        try:
            while True:
                if actor is None:
                    if streak.failures:
                        await streak.wait()
                    try:
                        actor = factory()
                        await actor.started()
                    except Exception as exc:
                        actor = None
                        streak.failed()
                        if await self._crashed(
                            ref, mailbox, crashes, policy, exc, "failed to start"
                        ):
                            return
                        continue
                try:
                    envelope = await mailbox.receive()
                except anyio.EndOfStream:
                    break
                try:
                    result = await actor.receive(envelope.message)
                except Exception as exc:
                    if envelope.reply is not None:
                        _answer(envelope.reply, error=exc)
                    envelope = None
                    actor = None
                    streak.failed()
                    if await self._crashed(ref, mailbox, crashes, policy, exc, "crashed"):
                        return
                    continue
                streak.succeeded()
                if envelope.reply is not None:
                    _answer(envelope.reply, result)
                envelope = None
            if actor is not None:
                await actor.stopped()
        finally:
            ref._mailbox.close()
            # Cancelled mid-message, or with messages queued: whoever asks
            # learns it now, not at the end of its timeout.
            if envelope is not None and envelope.reply is not None and not envelope.reply.done():
                _answer(envelope.reply, error=ActorStopped(f"actor {ref.name} is stopped"))
            _refuse_queued(ref, mailbox, "is stopped")
            self._refs.pop(ref.name, None)
            ref._finished.set()

    async def _crashed(
        self,
        ref: ActorRef[M],
        mailbox: Mailbox[_Envelope[M]],
        crashes: deque[float],
        policy: RestartPolicy,
        exc: Exception,
        what: str,
    ) -> bool:
        """Count a crash; past the budget give up (True), else log it for a restart."""
        if self._over_budget(crashes, policy):
            await self._give_up(ref, mailbox, exc)
            return True
        # With its traceback: a crash (a workflow handler that raised, say)
        # is someone's bug to find.
        log.warning("actor %s %s, restarting: %s", ref.name, what, _told(exc), exc_info=exc)
        return False

    @staticmethod
    def _over_budget(crashes: deque[float], policy: RestartPolicy) -> bool:
        now = time.monotonic()
        crashes.append(now)
        while crashes and crashes[0] < now - policy.window:
            crashes.popleft()
        return len(crashes) > policy.max_restarts

    async def _give_up(
        self,
        ref: ActorRef[M],
        mailbox: Mailbox[_Envelope[M]],
        exc: BaseException,
    ) -> None:
        log.error("actor %s gave up after repeated crashes: %s", ref.name, _told(exc))
        ref._mailbox.close()
        _refuse_queued(ref, mailbox, "gave up")
        if self._on_give_up is not None:
            await self._on_give_up(ref.name, exc)


def _told(exc: BaseException) -> str:
    """``Type: message``, the way a run's ``error`` keeps it."""
    return f"{type(exc).__name__}: {exc}"


def _refuse_queued(ref: ActorRef[M], mailbox: Mailbox[_Envelope[M]], why: str) -> None:
    """Answer what is still queued for an actor that will not handle it: an
    ``ask`` learns at once instead of at its timeout."""
    while True:
        try:
            envelope = mailbox.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            return
        if envelope.reply is not None:
            _answer(envelope.reply, error=ActorStopped(f"actor {ref.name} {why}"))
