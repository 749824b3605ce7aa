"""Events' group commit: the RunEvents frames that wait at the same moment,
from any number of sidecars, ingested in one write transaction.

Each frame's ingestion is a durable commit (its EventsAck lets the sidecar
forget the events), and a commit costs an fsync: with many deployments each
shipping a lone mail's events, one commit a frame bounds the hub at what the
disk syncs a second. :class:`GroupCommit` takes the first waiting frame's
body and every one already queued behind it (up to ``max_batch``), runs
them in one transaction, each in a savepoint of its own
(:func:`~hub.store.each_in_savepoint`: a body that raises, a stale fence
say, takes back only its own writes), and answers each caller only after
COMMIT returned. A failed commit answers every caller of the batch with its
error: none of them is acknowledged, and each sidecar sends its events
again. A lone frame runs alone, without a savepoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc

from ..._errors import HubShuttingDown
from ...store import Store, Tx, each_in_savepoint

T = TypeVar("T")


@dataclass(eq=False)
class _Request(Generic[T]):
    body: Callable[[Tx], T]
    done: anyio.Event = field(default_factory=anyio.Event)
    result: T | None = None
    error: BaseException | None = None

    def finish(self, result: T | None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()


class GroupCommit:
    """Bodies of write transactions, grouped; run :meth:`run` in a task group."""

    def __init__(self, store: Store, *, max_batch: int = 64, queue_size: int = 256) -> None:
        self._store = store
        self._max_batch = max_batch
        self._send, self._receive = anyio.create_memory_object_stream[_Request[Any]](queue_size)

    async def transact(self, body: Callable[[Tx], T]) -> T:
        """``body``'s result once it is committed; what it raised, or what
        broke the batch's commit, raised here."""
        request: _Request[T] = _Request(body)
        try:
            try:
                self._send.send_nowait(request)
            except anyio.WouldBlock:
                await self._send.send(request)  # full: the callers wait, memory does not grow
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise HubShuttingDown("the hub is shutting down") from exc
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result  # type: ignore[return-value]  # set with no error

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; callers still waiting then get HubShuttingDown."""
        batch: list[_Request[Any]] = []
        async with self._send, self._receive:
            try:
                task_status.started()
                async for first in self._receive:
                    batch = [first]
                    while len(batch) < self._max_batch:
                        try:
                            batch.append(self._receive.receive_nowait())
                        except anyio.WouldBlock:
                            break
                    await self._commit(batch)
                    batch = []
            finally:
                stopping = HubShuttingDown("the hub is shutting down")
                for request in batch:
                    request.finish(None, stopping)
                while True:
                    try:
                        self._receive.receive_nowait().finish(None, stopping)
                    except anyio.WouldBlock:
                        break

    async def _commit(self, batch: list[_Request[Any]]) -> None:
        if len(batch) == 1:
            (request,) = batch
            try:
                result = await self._store.transact(request.body)
            except Exception as exc:
                request.finish(None, exc)
            else:
                request.finish(result)
            return
        try:
            results = await self._store.transact(
                lambda tx: each_in_savepoint(tx, [r.body for r in batch])
            )
        except Exception as exc:
            for request in batch:
                request.finish(None, exc)
            return
        for request, outcome in zip(batch, results, strict=True):
            if isinstance(outcome, Exception):
                request.finish(None, outcome)
            else:
                request.finish(outcome)
