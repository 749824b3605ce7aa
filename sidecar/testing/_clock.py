"""The kit's clock, and what falls due on it: timers, approval timeouts and
schedules, in the order the hub would fire them.

Nothing here waits: the clock moves only when the test skips time, and
each fire due on the way is taken in due order (ties in the order they
were made), the clock standing at its due time while it is processed.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import anyio.lowlevel

from runtime.schedules import ScheduleSpec

from ._hub import KitHub


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
        if approval.expires_at is not None:
            found.append((approval.expires_at, i, Due(approval.expires_at, "approval", approval)))
    for schedule in schedules:
        found.append(
            (schedule.next_due, schedule.order, Due(schedule.next_due, "schedule", schedule))
        )
    due = [f for f in found if f[0] <= until]
    if not due:
        return None
    return min(due, key=lambda f: (f[0], f[1]))[2]
