"""The handler timeout of a step's calls: one cancel scope, one loop timer.

Each handler call may run ``timeout`` seconds. A cancel scope with a
deadline of its own per call (``anyio.move_on_after``: the scope, a loop
timer armed and cancelled) cost about 6 us a call on uvloop, a tenth of the
sidecar's CPU per mail under load. A step's calls share one scope now, and
one timer that is moved only when it fires: if the call running then has
passed its deadline, the scope is cancelled; else the timer is set again
for that call's deadline. So a call that overruns is cancelled when its own
deadline comes, as before, and a call costs two attribute writes.

The scope is cancelled only while a call runs past its deadline, and a call
is always at an ``await`` when the timer fires (the loop runs timers only
while the step's task is suspended), so the cancellation lands in that call.
"""

from __future__ import annotations

import asyncio
from math import inf

import anyio


class HandlerWatch:
    """Cancels ``scope`` when a call begun with :meth:`begin` has not ended
    (:meth:`end`) within ``timeout`` seconds; :attr:`overran` then names it."""

    __slots__ = ("_deadline", "_label", "_loop", "_scope", "_timer", "_when", "overran", "timeout")

    def __init__(self, scope: anyio.CancelScope, timeout: float) -> None:
        self.timeout = timeout
        self.overran: str | None = None
        """The label of the call cancelled for its timeout (None: none was)."""
        self._scope = scope
        self._loop = asyncio.get_running_loop()
        self._deadline = inf  # the running call's; inf between calls
        self._label = ""
        self._timer: asyncio.TimerHandle | None = None
        self._when = inf  # when the timer fires

    def close(self) -> None:
        """Stop timing (``contextlib.closing``): the timer goes."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def begin(self, label: str) -> None:
        """A call starts: it has ``timeout`` seconds from now."""
        self._deadline = self._loop.time() + self.timeout
        self._label = label
        if self._timer is None:
            self._arm(self._deadline)

    def end(self) -> None:
        """The call returned (or raised) in time."""
        self._deadline = inf

    def _arm(self, when: float) -> None:
        self._when = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        # Due at the moment the timer was set for is due now, even when the
        # loop runs it a hair early (its clock's resolution).
        now = max(self._loop.time(), self._when)
        self._timer, self._when = None, inf
        if now >= self._deadline:
            self.overran = self._label
            self._scope.cancel()
        elif self._deadline < inf:
            self._arm(self._deadline)
