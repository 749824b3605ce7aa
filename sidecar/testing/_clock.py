"""The kit's clock, and what falls due on it: timers, approval timeouts and
schedules, fired in the order the hub would fire them.

Nothing here waits: the clock moves only when the test skips time, and
each fire due on the way is taken in due order (ties in the order they
were made), the clock standing at its due time while it is processed to
rest, before the next.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.lowlevel
import msgspec

from runtime.schedules import ScheduleSpec
from runtime.wire import SCHEDULE_KIND, ScheduleFired

from ._errors import NotSettled
from ._hub import KitHub, kit_id

SAME_INSTANT = 1000
"""Fires due at one time on the clock before the kit calls it a loop (a
timer that sets itself again ``after=0``)."""


class Clock:
    """Epoch seconds that move only when told: the handlers' ``ctx.now`` and
    the base of every ``set_timer(after=...)``."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else float(start)

    def __call__(self) -> float:
        return self.now

    def move_to(self, when: float) -> None:
        self.now = max(self.now, when)


async def no_wait(seconds: float) -> None:
    """A step's retry backoff under test: returns at once (a checkpoint, so
    a cancellation still gets through)."""
    await anyio.lowlevel.checkpoint()


_order = itertools.count()


@dataclass
class KitSchedule:
    """A schedule the test added (``WorkflowTest.schedule``), with its next fire."""

    schedule_id: str
    spec: ScheduleSpec
    subject: str
    payload: Any
    next_due: float
    order: int = field(default_factory=lambda: next(_order))


@dataclass(frozen=True)
class Due:
    """The next thing due: a timer (run, name), an approval's timeout, or a schedule."""

    at: float
    kind: str  # "timer", "approval" or "schedule"
    key: Any


def next_due(hub: KitHub, schedules: list[KitSchedule], until: float) -> Due | None:
    """The first fire due at or before ``until``, None when nothing is."""
    found: list[tuple[float, int, Due]] = []
    for i, timer in enumerate(hub.timers.values()):
        found.append((timer.due_at, i, Due(timer.due_at, "timer", (timer.run_id, timer.name))))
    for i, approval in enumerate(hub.approvals.values()):
        if approval.expires_at is not None and not hub.runs[approval.run_id].ended:
            found.append((approval.expires_at, i, Due(approval.expires_at, "approval", approval)))
    for schedule in schedules:
        found.append(
            (schedule.next_due, schedule.order, Due(schedule.next_due, "schedule", schedule))
        )
    due = [f for f in found if f[0] <= until]
    if not due:
        return None
    return min(due, key=lambda f: (f[0], f[1]))[2]


class Timeline:
    """The kit's clock moved on, with the fires due on the way."""

    def __init__(self, clock: Clock, hub: KitHub) -> None:
        self.clock = clock
        self._hub = hub
        self.schedules: list[KitSchedule] = []

    def schedule(self, spec: ScheduleSpec, subject: str, payload: Any) -> str:
        spec.check()
        schedule_id = kit_id("sch")
        first = spec.first_due(self.clock.now)
        self.schedules.append(KitSchedule(schedule_id, spec, subject, payload, first))
        return schedule_id

    def unschedule(self, schedule_id: str) -> None:
        self.schedules = [s for s in self.schedules if s.schedule_id != schedule_id]

    async def advance_to(self, when: float, settle: Callable[[], Awaitable[None]]) -> None:
        """Fire what is due up to ``when``, each followed by ``settle``."""
        await settle()
        fired, at = 0, self.clock.now
        while (due := next_due(self._hub, self.schedules, when)) is not None:
            fired, at = (fired + 1, at) if due.at <= at else (1, due.at)
            if fired > SAME_INSTANT:
                raise NotSettled(f"more than {SAME_INSTANT} fires due at {at}: a timer loop?")
            self.clock.move_to(due.at)
            fired_at = self.clock.now
            if due.kind == "timer":
                self._hub.fire_timer(self._hub.timers[due.key], fired_at)
            elif due.kind == "approval":
                self._hub.time_out(due.key.approval_id)
            else:
                self._fire(due.key, fired_at)
            await settle()
        self.clock.move_to(when)

    def _fire(self, schedule: KitSchedule, fired_at: float) -> None:
        due_at = schedule.next_due
        schedule.next_due = schedule.spec.next_due(due_at, fired_at)
        top = self._hub.top
        if top is not None and self._hub.runs[top].ended:
            return  # refused at the hub: the top-level run takes no more items
        body = ScheduleFired(
            schedule_id=schedule.schedule_id,
            due_at=due_at,
            fired_at=fired_at,
            subject=schedule.subject,
            payload=schedule.payload,
        )
        self._hub.accept(
            kind=SCHEDULE_KIND,
            message_id=f"schedule:{schedule.schedule_id}:{due_at!r}",
            subject=schedule.subject,
            body=msgspec.json.encode(body),
        )
