"""One batching loop under every group commit of the hub: callers' requests
queued in a bounded mailbox, taken in batches, each batch handed to its
owner's commit, every caller answered once.

The hub has two group commits, the acceptor's (``hub.intake``: triggers)
and the events' (``hub.wire.events``: bodies of transactions); each writes
one transaction for every request waiting at that moment, so that one
fsync serves them all. What they share is here: :class:`Batches` takes the
first request, drains whatever else already waits (up to ``max_batch``,
counted by each request's ``weight``), awaits the owner's ``commit`` of the
batch, and, when it stops, tells every caller still waiting that the hub is
shutting down. What a batch does, and how a failure is split among its
callers, is the owner's: its ``commit`` answers each request
(:meth:`Pending.finish`) before it returns.

The mailbox is ``runtime.actors.Mailbox``, not an anyio stream: a send into
room and a receive of a queued request return at once. A full mailbox makes
callers wait (backpressure, not unbounded memory).

A caller that finds the loop idle (waiting for a request, none queued, no
commit running) takes the loop's role for one batch: it gives the event
loop one turn, so that callers ready at the same moment queue behind it,
takes them, and commits the batch in its own task (shielded when it
holds others' requests, as the loop's commit is from its callers). A lone
request (a lone mail's accept, its events) so costs no hand-off to the
loop's task and back. Whoever comes while that commit runs queues, and the
loop commits them once it is done, all that queued meanwhile in one batch:
one commit at a time, in the order the requests came, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc

from runtime.actors import Mailbox

from .._errors import HubShuttingDown

T = TypeVar("T")
R = TypeVar("R", bound="Pending[Any]")


class Pending(Generic[T]):
    """A caller's request while it waits: answered once, with a result or an
    error (later answers are ignored)."""

    __slots__ = ("done", "error", "result", "weight")

    def __init__(self, weight: int = 1) -> None:
        self.weight = weight
        """What this request counts for against the batch's ``max_batch``."""
        # A bare asyncio event (the hub runs on anyio's asyncio backend): an
        # anyio.Event costs a backend lookup for every request.
        self.done = asyncio.Event()
        self.result: T | None = None
        self.error: BaseException | None = None

    def finish(self, result: T | None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()


class Batches(Generic[R]):
    """The loop of one group commit; run :meth:`run` in a task group."""

    def __init__(
        self,
        commit: Callable[[list[R]], Awaitable[None]],
        *,
        max_batch: int,
        queue_size: int,
    ) -> None:
        self._commit = commit
        self._max_batch = max_batch
        self._mailbox: Mailbox[R] = Mailbox(queue_size)
        self._idle = False  # the loop waits for a request and commits none
        self._queued = 0  # requests sent, or being sent, and not yet taken
        self._inline: asyncio.Future[None] | None = None  # a caller's commit running

    async def ask(self, request: R) -> None:
        """Queue ``request`` and wait until its batch answered it; its error,
        if it got one, is raised here (``request.result`` holds the rest).
        :class:`HubShuttingDown` once the loop has stopped."""
        if self._idle and not self._queued and self._inline is None:
            await self._commit_inline(request)
        else:
            await self._queue(request)
        await request.done.wait()
        if request.error is not None:
            raise request.error

    async def _commit_inline(self, first: R) -> None:
        self._inline = done = asyncio.get_running_loop().create_future()
        try:
            # One turn first: callers ready at this moment queue behind this
            # one and share its commit, as they would the loop's. Cancelled
            # here, it has taken nobody's request: the loop takes them.
            await asyncio.sleep(0)
            batch = [first]
            self._take_more(batch, first.weight)
            if len(batch) == 1:
                # Its caller's alone: cancelled before the store's transaction
                # began, nothing is committed; once begun, the transaction
                # runs to its end whatever happens to its caller.
                await self._commit(batch)
            else:
                # Others wait on it, as on the loop's commit: shielded.
                with anyio.CancelScope(shield=True):
                    await self._commit(batch)
        finally:
            self._inline = None
            if not done.done():  # the loop's wait for it was cancelled
                done.set_result(None)

    def _take_more(self, batch: list[R], size: int) -> None:
        """What already waits, after ``batch``, up to ``max_batch`` by weight."""
        mailbox, max_batch = self._mailbox, self._max_batch
        while size < max_batch:
            try:
                more = mailbox.receive_nowait()
            except anyio.WouldBlock:
                break
            batch.append(more)
            size += more.weight
            self._queued -= 1

    async def _queue(self, request: R) -> None:
        self._queued += 1
        try:
            try:
                # Without a checkpoint while there is room: one step less of
                # the caller's whole coroutine stack per request.
                self._mailbox.send_nowait(request)
            except anyio.WouldBlock:
                await self._mailbox.send(request)  # full: the caller waits
        except anyio.ClosedResourceError as exc:
            self._queued -= 1
            raise HubShuttingDown("the hub is shutting down") from exc
        except BaseException:
            self._queued -= 1  # cancelled while waiting for room: not sent
            raise

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve batches until cancelled; callers still waiting then get
        :class:`HubShuttingDown`, and later ones at once."""
        batch: list[R] = []
        mailbox = self._mailbox
        try:
            task_status.started()
            while True:
                self._idle = True
                try:
                    first = await mailbox.receive()
                finally:
                    self._idle = False
                self._queued -= 1
                batch = [first]
                while self._inline is not None:  # came while a caller committed
                    await self._inline
                # What queued behind it meanwhile shares its commit.
                self._take_more(batch, first.weight)
                await self._commit(batch)
                batch = []
        finally:
            mailbox.close()
            stopping = HubShuttingDown("the hub is shutting down")
            for request in batch:
                request.finish(None, stopping)
            while True:
                try:
                    mailbox.receive_nowait().finish(None, stopping)
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
