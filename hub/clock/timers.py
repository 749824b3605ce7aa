"""Where timers fire: the hub's one loop that turns each due ``timer`` row
into an item for its run, through the one accept path.

A row is a run's ``ctx.set_timer`` (an item of kind ``timer``: subject the
timer's name, body a ``TimerFired`` as JSON, message id ``timer:<id>``) or
the expiry of an approval asked with a timeout (the approval decided
``timeout``, as ``POST /approvals/{id}`` decides it, message id
``approval:<id>:timeout``). Each page of due rows is one write transaction:
the rows are deleted conditionally (only what this delete removed is this
round's: another hub, a cancel or a move may have got there first) and the
owned ones are accepted in due order, so each run gets its timers in order
and a fire is never lost nor doubled, whatever crashes. A fire the run can
no longer take (it ended; the approval was decided) just drops the row.

The loop reads the earliest due time (index ``timer_due``) and sleeps until
then, or until woken: the wire side wakes it after committing a timer. With
nothing due it does not poll; an idle wait is capped at :data:`IDLE_LOOK` as
a safety net. A store error makes it back off and go on.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc
import msgspec

from runtime import Backoff, Retry, Wakeup
from runtime.wire import APPROVAL_TIMEOUT, TIMER_KIND, TimerFired

from ..metrics import HubMetrics
from ..store import (
    Accepted,
    DueTimer,
    Store,
    Trigger,
    Tx,
    accept_triggers,
    claim_timers,
    decision_trigger,
    due_timers,
    earliest_timer_due,
)
from .rounds import run_rounds

log = logging.getLogger("mailrun.hub.timers")

IDLE_LOOK = 60.0
"""The longest the loop sleeps without looking at the table (a safety net)."""
PAGE = 1000
"""Due rows fired in one transaction at most; the loop takes pages until none is due."""
LATE_AFTER = 1.0
"""A fire more than this many seconds after its due time counts as late."""


@dataclass
class Fired:
    """What one page fired: the deployments that got items, and how late each
    accepted fire was (seconds after its due time)."""

    woken: set[str] = field(default_factory=set)
    lateness: list[float] = field(default_factory=list)
    full: bool = False  # the page was full: more may be due


def timer_trigger(row: DueTimer, fired_at: float) -> Trigger:
    """The item a due row becomes."""
    if row.kind != TIMER_KIND:
        return decision_trigger(row.name, APPROVAL_TIMEOUT)
    payload = None if row.payload is None else msgspec.Raw(row.payload)
    body = TimerFired(name=row.name, due_at=row.due_at, fired_at=fired_at, payload=payload)
    return Trigger(
        deployment_id=row.deployment_id,
        run_id=row.run_id,
        kind=TIMER_KIND,
        message_id=f"timer:{row.id}",
        subject=row.name,
        body=msgspec.json.encode(body),
    )


def fire_page(tx: Tx, now: float, limit: int = PAGE) -> Fired:
    """Inside a write transaction: claim up to ``limit`` rows due by ``now``
    and accept their items, in due order."""
    rows = due_timers(tx, now, limit)
    owned = claim_timers(tx, [row.id for row in rows])
    mine = [row for row in rows if row.id in owned]
    fired = Fired(full=len(rows) == limit)
    if not mine:
        return fired
    outcomes, fired.woken = accept_triggers(tx, [timer_trigger(row, now) for row in mine])
    for row, outcome in zip(mine, outcomes, strict=True):
        if isinstance(outcome, Accepted):
            if not outcome.duplicate:
                fired.lateness.append(now - row.due_at)
        elif isinstance(outcome, Exception):
            log.error("%s %s of run %s not stored: %s", row.kind, row.name, row.run_id, outcome)
        else:  # the run ended, the approval was decided: nothing to fire
            log.info("%s %s of run %s dropped: %s", row.kind, row.name, row.run_id, outcome.reason)
    return fired


class TimerLoop:
    """The loop (``run``), its wake (``wake``), and who hears of the items it
    accepted (``on_fired``: the dispatcher's wake, given the deployments)."""

    def __init__(
        self,
        store: Store,
        *,
        metrics: HubMetrics | None = None,
        backoff: Backoff | None = None,
        idle_look: float = IDLE_LOOK,
        page: int = PAGE,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._retry = Retry(backoff)
        self._wakeup = Wakeup()
        self._idle_look = idle_look
        self._page = page
        self.on_fired: Callable[[set[str]], object] | None = None
        self.reads = 0
        """Reads of the earliest due time: one per wake (tests count them)."""
        self.last_error: str | None = None

    def wake(self) -> None:
        """A timer was committed: look at the earliest due time again."""
        self._wakeup.set()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Fire due timers until cancelled."""
        task_status.started()
        await run_rounds(
            self._round,
            wakeup=self._wakeup,
            retry=self._retry,
            idle_look=self._idle_look,
            what="timers",
            on_error=self._failed,
        )

    def _failed(self, error: str | None) -> None:
        self.last_error = error

    async def _round(self) -> float | None:
        """Fire what is due by now; seconds until the next due timer (0: look
        again at once; None: none is pending)."""
        due = await self._store.read(earliest_timer_due)
        self.reads += 1
        now = time.time()
        if due is not None and due <= now:
            await self._fire()
            return 0.0
        return None if due is None else due - now

    async def _fire(self) -> None:
        """Pages of due rows until none is left, each read at the time its
        transaction runs (its items' ``fired_at``: a backlog's later pages
        say how late they really were); each page's deployments woken once
        it committed."""
        while True:
            fired = await self._store.transact(lambda tx: fire_page(tx, time.time(), self._page))
            if self._metrics is not None:
                for seconds in fired.lateness:
                    self._metrics.timers_fired.inc()
                    if seconds > LATE_AFTER:
                        self._metrics.timers_late.inc()
            if fired.woken and self.on_fired is not None:
                result = self.on_fired(fired.woken)
                if inspect.isawaitable(result):
                    await result
            if not fired.full:
                return
