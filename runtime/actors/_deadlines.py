"""Deadlines for many futures on one loop timer: the actor kernel's ask timeout.

A loop timer per ``ask`` (``loop.call_at``, then its cancel) cost about a
sixth of an ask handed back and forth (``bench/parts/actor_kernel.py``, asyncio's
loop). Asks to one actor are answered in the order they were sent, and most
share one timeout, so their deadlines arrive in order too: one timer, armed
for the nearest deadline, serves them all. A future answered, or cancelled
(its waiter left), before its deadline is skipped; one still pending when
the timer fires is failed with the owner's error. The timer is re-armed only
when a deadline comes before the one it is set for, or when it fires with
futures still pending.

Futures answered in order leave at once (:meth:`Deadlines.discard`); the rest
leave when the timer fires. What is tracked is bounded by its owner: for an
actor, what its mailbox holds and the one message being handled.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from math import inf

_Entry = tuple[float, asyncio.Future[object], float]


class Deadlines:
    """Fail each tracked future that is not done by its deadline with
    ``expired(timeout)``."""

    __slots__ = ("_expired", "_pending", "_timer", "_when")

    def __init__(self, expired: Callable[[float], BaseException]) -> None:
        self._expired = expired
        self._pending: deque[_Entry] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._when = inf  # when the timer fires; inf while there is none

    def __len__(self) -> int:
        return len(self._pending)

    def add(
        self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[object], timeout: float
    ) -> None:
        """Fail ``future`` unless it is done within ``timeout`` seconds."""
        deadline = loop.time() + timeout
        pending = self._pending
        while pending and pending[0][1].done():
            pending.popleft()
        pending.append((deadline, future, timeout))
        if deadline < self._when:
            self._arm(loop, deadline)

    def discard(self, future: asyncio.Future[object]) -> None:
        """``future`` needs no deadline any more. Cheap for the oldest one
        (the usual case); any other leaves when it is next looked at."""
        pending = self._pending
        if pending and pending[0][1] is future:
            pending.popleft()

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._when = when
        self._timer = loop.call_at(when, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        # Everything due at the moment the timer was set for is due now,
        # even when the loop runs it a hair early (its clock's resolution).
        now = max(loop.time(), self._when)
        self._timer = None
        self._when = inf
        kept: deque[_Entry] = deque()
        nearest = inf
        for entry in self._pending:
            deadline, future, timeout = entry
            if future.done():
                continue
            if deadline <= now:
                future.set_exception(self._expired(timeout))
            else:
                kept.append(entry)
                nearest = min(nearest, deadline)
        self._pending = kept
        if kept:
            self._arm(loop, nearest)
