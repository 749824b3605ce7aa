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
COMMIT returned. A failed commit answers every caller of the batch with
its error: none of them is acknowledged, and each sidecar sends its events
again. A lone frame runs alone, without a savepoint. The loop is
``hub.store.Batches``; what a batch runs, and how its failure is split, is
this module's own. A Sleep's grant comes here too
(``hub.wire.requests.sleep``): a durable write answered outward, as a
frame's events are, and one waiting beside them shares their commit. A
join's claim does not (``hub.wire.sessions``: it decides on sessions that
open only after its COMMIT).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc

from ...store import Batches, Pending, Store, Tx, each_in_savepoint

T = TypeVar("T")


class _Request(Pending[T], Generic[T]):
    __slots__ = ("body",)

    def __init__(self, body: Callable[[Tx], T]) -> None:
        super().__init__()
        self.body = body


class GroupCommit:
    """Bodies of write transactions, grouped; run :meth:`run` in a task group."""

    def __init__(self, store: Store, *, max_batch: int = 64, queue_size: int = 256) -> None:
        self._store = store
        self._batches: Batches[_Request[Any]] = Batches(
            self._commit, max_batch=max_batch, queue_size=queue_size
        )

    async def transact(self, body: Callable[[Tx], T]) -> T:
        """``body``'s result once it is committed; what it raised, or what
        broke the batch's commit, raised here."""
        request: _Request[T] = _Request(body)
        await self._batches.ask(request)
        return request.result  # type: ignore[return-value]  # set with no error

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; callers still waiting then get HubShuttingDown."""
        await self._batches.run(task_status=task_status)

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
