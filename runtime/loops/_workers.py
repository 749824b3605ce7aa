"""Workers: short jobs run by tasks of the owner's task group that stay for
the next job, instead of a task spawned per job.

A server that answers each request in a task of its own (the hub's HTTP
answers, its NATS requests) spawned one per request: through anyio, a task
costs its ``TaskInfo`` (a cancel scope, an event), a name worked out from
the coroutine, a host scope entered and left, and asyncio's task with its
registration: about forty calls, the largest single cost of a lone
request. :class:`Workers` hands a job to a task that finished its last one
and waits for the next (a future completed, the task resumed), and spawns a
task only when none waits. At most ``keep`` tasks wait; one that finishes a
job beyond that ends, so a burst leaves no crowd behind.

Every task is the owner's: an error of a job is raised in the owner's task
group as a spawned task's would be, and cancelling the group cancels the
waiting tasks with the busy ones. :meth:`close` ends the waiting tasks
(and each busy one after its job), so a group that waits for its tasks to
finish is not held by idle ones. A job runs in its task's context: what a
job sets in a context variable it must reset (as ``with`` blocks do).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import anyio.abc

Job = Callable[..., Awaitable[object]]
"""A job: an async function, called with the arguments it was handed."""

_Handed = tuple[Job, tuple[Any, ...]] | None  # None: close


class Workers:
    """Tasks of ``group`` that run the jobs handed to :meth:`start_soon`."""

    __slots__ = ("_closed", "_group", "_idle", "_keep")

    def __init__(self, group: anyio.abc.TaskGroup, *, keep: int = 16) -> None:
        if keep < 0:
            raise ValueError("keep is at least 0")
        self._group = group
        self._keep = keep
        self._closed = False
        # The waiting tasks, each a future its next job completes; the last
        # to wait is handed the next job (its frames are the warmest).
        self._idle: list[asyncio.Future[_Handed]] = []

    def start_soon(self, job: Job, *args: Any) -> None:
        """Run ``job(*args)`` in a waiting task, or in a new one of the group."""
        if self._closed:
            raise RuntimeError("these workers are closed")
        idle = self._idle
        while idle:
            waiter = idle.pop()
            if not waiter.done():  # else cancelled: its task is ending
                waiter.set_result((job, args))
                return
        self._group.start_soon(self._work, job, args)

    def close(self) -> None:
        """No more jobs: the waiting tasks end, the busy ones after their job."""
        self._closed = True
        for waiter in self._idle:
            if not waiter.done():
                waiter.set_result(None)
        self._idle.clear()

    async def _work(self, job: Job, args: tuple[Any, ...]) -> None:
        idle = self._idle
        loop = asyncio.get_running_loop()
        while True:
            await job(*args)
            if self._closed or len(idle) >= self._keep:
                return
            waiter: asyncio.Future[_Handed] = loop.create_future()
            idle.append(waiter)
            try:
                handed = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    # Handed a job just before the cancellation reached this
                    # task: the job is this task's, and meets it at once.
                    handed = waiter.result()
                    if handed is not None:
                        await handed[0](*handed[1])
                else:
                    waiter.cancel()
                    with suppress(ValueError):  # already taken off by close
                        idle.remove(waiter)
                raise
            if handed is None:
                return
            job, args = handed
