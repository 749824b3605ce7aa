"""When a schedule fires: every N seconds, or at the times a cron expression
names in a time zone. Shared by the hub, which fires schedules, and the
sidecar's test kit, which fires them on its own clock.

Cron expressions are read by ``cronsim`` (the standard five fields, with
``L``, ``W``, ``#`` and the usual names), in the zone ``tz`` (the standard
library's ``zoneinfo``): ``0 9 * * 1-5`` in ``Europe/Paris`` fires at 09:00
Paris time on weekdays, across daylight saving changes as cronsim handles
them (a time the change skips fires once, at the first moment after the
gap; a time it repeats fires once).

A fire missed while the hub was down is fired once when it is back: the
next due time is always the first one after *now*, never a walk through
every missed one (:meth:`ScheduleSpec.next_due`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from cronsim import CronSim, CronSimError

from .errors import InvalidSchedule

__all__ = ["MIN_EVERY", "InvalidSchedule", "ScheduleSpec"]

MIN_EVERY = 1.0
"""Seconds: the shortest interval a schedule may have (a shorter one is a
busy loop, not a schedule)."""


class ScheduleSpec(msgspec.Struct, frozen=True, kw_only=True):
    """``every`` seconds, or ``cron`` read in ``tz``."""

    every: float | None = None
    cron: str | None = None
    tz: str = "UTC"

    def check(self) -> None:
        """Raise :class:`InvalidSchedule` with the reason unless this can fire."""
        if (self.every is None) == (self.cron is None):
            raise InvalidSchedule("a schedule has one of every (seconds) or cron (an expression)")
        if self.every is not None:
            every = self.every
            if isinstance(every, bool) or not isinstance(every, int | float):
                raise InvalidSchedule(f"every is a number of seconds, not {every!r}")
            if not math.isfinite(every) or every < MIN_EVERY:
                raise InvalidSchedule(
                    f"every must be a finite number >= {MIN_EVERY:g}, not {every}"
                )
            if self.tz != "UTC":
                raise InvalidSchedule("tz goes with cron: an every schedule needs no zone")
            return
        self._zone()
        assert self.cron is not None
        try:
            CronSim(self.cron, datetime.now(self._zone()))
        except CronSimError as exc:
            raise InvalidSchedule(f"cron expression {self.cron!r} does not parse: {exc}") from None

    def _zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidSchedule(f"unknown time zone {self.tz!r}") from None

    def first_due(self, now: float) -> float:
        """The first fire after ``now`` (a new schedule's)."""
        if self.every is not None:
            return now + self.every
        return self._cron_after(now)

    def next_due(self, due: float, now: float) -> float:
        """The fire after the one that was due at ``due``, fired at ``now``:
        the first after ``now`` (missed ones collapse into the fire just
        made), keeping an ``every`` schedule's phase (``due + k * every``)."""
        if self.every is not None:
            missed = max(0, math.floor((now - due) / self.every))
            following = due + (missed + 1) * self.every
            return following if following > now else following + self.every
        return self._cron_after(max(now, due))

    def _cron_after(self, t: float) -> float:
        assert self.cron is not None
        start = datetime.fromtimestamp(t, UTC).astimezone(self._zone())
        try:
            fire = next(CronSim(self.cron, start))
        except StopIteration:
            # cronsim ends for an expression with no future match (Feb 30th).
            raise InvalidSchedule(f"cron expression {self.cron!r} never fires") from None
        except CronSimError as exc:
            raise InvalidSchedule(f"cron expression {self.cron!r} does not parse: {exc}") from None
        return fire.timestamp()
