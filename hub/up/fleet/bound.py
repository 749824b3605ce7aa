"""A sidecar's start bound (``mailrun up --sidecar-join-timeout``): how long
each start the fleet runs has from its spawn (or its fork request) to the
hub's Welcome, and the checks that restart one that missed it.

A start that misses its bound is killed and started again, through its
slot like a crash, with a jittered backoff of its own (docs/operations.md,
"A sidecar's start bound")"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from ..processes import Child
from .fleet import Fleet

Look = Callable[[str], Awaitable[bool | None]]
"""Whether the hub has a session of the deployment now (its sidecar was
welcomed, and has not been silent since); None: the hub did not answer."""
LOOK_AFTER = 10.0
"""Seconds from a start to its first look: twice the hub's stale time (5 s),
so that the session of the process before (killed, crashed) no longer
counts as connected."""
LOOK_EVERY = 5.0
"""Seconds between two looks at a start still not welcomed."""
BOUND_GROWTH = 4
"""A start's bound doubles with each miss in a row, up to this many times
the setting: a bound too short for a loaded machine never keeps a sidecar
out for good."""


class StartBound:
    """A sidecar's start has ``bound`` seconds, from its spawn (or its fork
    request) to its Welcome; one that misses it is restarted (``Child.restart``:
    killed, started again after a jittered backoff, through its slot).

    The clock runs only while the hub answers and NATS greets, as ``up``
    sees them: during an outage no sidecar can join, and after one every
    start gets the whole bound again, from the outage's end (each sidecar
    reconnects with a backoff of its own). A start is looked at
    ``LOOK_AFTER`` seconds in, then every ``LOOK_EVERY`` until it is seen
    welcomed or misses its bound: a start that joins costs one request."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        bound: float,
        look: Look,
        nats_up: Callable[[], Awaitable[bool]],
        say: Callable[[str], None],
        tick: float = 1.0,
    ) -> None:
        self.fleet = fleet
        self.bound = bound
        self._look = look
        self._nats_up = nats_up
        self._say = say
        self._tick = tick
        self._calm_since: float | None = None  # None: the hub or NATS is down
        self._looked: dict[str, tuple[float, float]] = {}  # dep -> (its start, last look)
        self.missed = 0
        """Starts this ``up`` restarted for missing their bound."""

    def answered(self, ok: bool) -> None:
        """The hub answered ``up``'s last request (``ok``), or did not."""
        if not ok:
            self._calm_since = None
        elif self._calm_since is None:
            self._calm_since = anyio.current_time()

    def bound_of(self, child: Child) -> float:
        """The bound of ``child``'s running start (longer after misses)."""
        return self.bound * min(2.0**child.misses, BOUND_GROWTH)

    async def run(self) -> None:
        """Look at the starts every ``tick`` seconds, forever."""
        self.answered(True)
        async with anyio.create_task_group() as tg:
            while True:
                await self.check(tg)
                await anyio.sleep(self._tick)

    async def check(self, tg: anyio.abc.TaskGroup) -> None:
        """Look at the starts due, and restart those that missed their bound."""
        joining = self.fleet.joining()
        for dep in self._looked.keys() - {dep for dep, _ in joining}:
            del self._looked[dep]
        for dep, child in joining:
            calm, spawned = self._calm_since, child.spawned_at
            if calm is None:
                return
            if spawned is None:
                continue
            now = anyio.current_time()
            age = now - max(spawned, calm)
            bound = self.bound_of(child)
            start, last = self._looked.get(dep, (spawned, -math.inf))
            if start != spawned:
                last = -math.inf
            if age < min(LOOK_AFTER, bound) or (now - last < LOOK_EVERY and age < bound):
                continue
            self._looked[dep] = (spawned, now)
            seen = await self._look(dep)
            if seen is None:
                self.answered(False)
                return
            if child.spawned_at != spawned or child.restarting:
                continue  # another process by now: the answer is not of it
            if seen:
                if child.misses:
                    self._say(
                        f"mailrun up: {child.name} welcomed after {child.misses}"
                        " start(s) that missed the bound"
                    )
                child.joined()
            elif age >= bound:
                if not await self._nats_up():
                    self._calm_since = None
                    return
                self.missed += 1
                why = (
                    f"was not welcomed by the hub within {bound:g} s of its start"
                    f" (killed; {self.missed} such restarts by this up)"
                )
                tg.start_soon(child.restart, why)
