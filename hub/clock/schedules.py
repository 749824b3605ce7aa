"""The schedule loop: one task of the hub that fires each schedule when it is
due, each fire one transaction (``hub.store.fire_schedule``), and wakes the
dispatcher for the deployments it gave items to.

It sleeps until the earliest ``next_due`` (the ``schedule_due`` index) or
until woken (:meth:`Scheduler.wake`: a schedule was added or removed); with
no schedule due it does not look at the table, except on a database other
hubs write too (PostgreSQL), where a schedule added through another hub
cannot wake this one: there it looks every ``idle_look`` seconds at most.
A store that fails makes the loop back off and try again, for as long as
it takes; a fire its deployment cannot take is logged, counted, and the
schedule moves on.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from functools import partial

import anyio
import anyio.abc

from runtime import Backoff, Retry, Wakeup

from ..metrics import Counter
from ..store import Accepted, Fire, Store, due_schedules, earliest_schedule_due, fire_schedule
from .rounds import run_rounds

log = logging.getLogger("mailrun.hub.schedules")

ROUND = 100
"""Schedules fired per look at the table, at most: a backlog is worked off
in rounds, each fire its own transaction."""


class Scheduler:
    """The schedule loop (``run``), what wakes it (``wake``) and what it
    counts (``render``, for ``GET /metrics``)."""

    def __init__(
        self,
        store: Store,
        *,
        on_accepted: Callable[[set[str]], object] | None = None,
        backoff: Backoff | None = None,
        idle_look: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._on_accepted = on_accepted
        self._retry = Retry(backoff)
        self._idle_look = idle_look
        self._clock = clock
        self._wakeup = Wakeup()
        self.last_error: str | None = None
        self.fires = Counter(
            "mailrun_schedule_fires_total",
            "Schedule fires accepted as a schedule item for their deployment's top-level run.",
        )
        self.rejected = Counter(
            "mailrun_schedule_fires_rejected_total",
            "Schedule fires their deployment did not take (its top-level run ended, or it"
            " was deleted): the schedule moved on.",
        )

    def wake(self) -> None:
        """A schedule was added or removed: look again now."""
        self._wakeup.set()

    def render(self) -> str:
        return "\n".join([*self.fires.render(), *self.rejected.render()]) + "\n"

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Fire schedules as they fall due, until cancelled."""
        task_status.started()
        await run_rounds(
            self._round,
            wakeup=self._wakeup,
            retry=self._retry,
            idle_look=self._idle_look,
            what="schedules",
            on_error=self._failed,
        )

    def _failed(self, error: str | None) -> None:
        self.last_error = error

    async def _round(self) -> float | None:
        """Fire what is due; seconds until the next due time (0: more are due
        now; None: no schedule at all)."""
        due = await self._store.read(partial(due_schedules, now=self._clock(), limit=ROUND))
        for schedule in due:
            fire = await self._store.transact(
                partial(fire_schedule, schedule=schedule, now=self._clock())
            )
            await self._fired(fire)
        if len(due) == ROUND:
            return 0.0
        earliest = await self._store.read(earliest_schedule_due)
        return None if earliest is None else max(0.0, earliest - self._clock())

    async def _fired(self, fire: Fire) -> None:
        outcome = fire.outcome
        if outcome is None:
            return  # fired by another hub, or removed meanwhile
        late = self._clock() - fire.due_at
        if isinstance(outcome, Accepted):
            self.fires.inc()
            log.info(
                "schedule %s fired for %s (due %.3f, %.1f s late): %s",
                fire.schedule_id,
                fire.deployment_id,
                fire.due_at,
                late,
                outcome.dispatch_id,
            )
        else:
            self.rejected.inc()
            detail = (
                f"{outcome.reason}: {outcome.detail}"
                if not isinstance(outcome, Exception)
                else str(outcome)
            )
            log.warning(
                "schedule %s of %s: its fire due %.3f was not taken (%s)%s",
                fire.schedule_id,
                fire.deployment_id,
                fire.due_at,
                detail,
                "; the schedule is removed" if fire.next_due is None else "",
            )
        if fire.woken and self._on_accepted is not None:
            woken = self._on_accepted(fire.woken)
            if inspect.isawaitable(woken):
                await woken
