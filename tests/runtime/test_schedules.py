"""runtime.schedules: when a schedule fires. An every schedule keeps its
phase, a cron one is read in its zone (across daylight saving changes as
cronsim handles them), missed fires collapse into one, and every input that
cannot fire is refused with its reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runtime.schedules import MIN_EVERY, InvalidSchedule, ScheduleSpec


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def test_an_every_schedule_is_first_due_one_interval_on() -> None:
    assert ScheduleSpec(every=30).first_due(1000.0) == 1030.0


def test_an_every_schedule_keeps_its_phase_when_fired_late() -> None:
    spec = ScheduleSpec(every=10)
    # Fired 0.3 s late: the next one is still on the grid, not 10 s after the fire.
    assert spec.next_due(1000.0, 1000.3) == 1010.0
    assert spec.next_due(1000.0, 1000.0) == 1010.0
    # Fired exactly on a later grid point: that point is past, the next one is due.
    assert spec.next_due(1000.0, 1020.0) == 1030.0


def test_missed_every_fires_collapse_into_one() -> None:
    spec = ScheduleSpec(every=10)
    # Down from 1000 to 1055: five intervals missed, one fire at 1055, next on the grid.
    following = spec.next_due(1000.0, 1055.0)
    assert following == 1060.0
    assert following > 1055.0


def test_a_cron_schedule_is_read_in_its_zone_across_a_dst_change() -> None:
    spec = ScheduleSpec(cron="0 9 * * *", tz="Europe/Paris")
    spec.check()
    saturday = at("2026-03-28T09:00:00+01:00")  # the last day of winter time
    assert utc(spec.first_due(saturday - 60)) == "2026-03-28T08:00:00+00:00"
    # Summer time from Sunday: 09:00 in Paris is an hour earlier in UTC.
    sunday = spec.next_due(saturday, saturday)
    assert utc(sunday) == "2026-03-29T07:00:00+00:00"
    assert sunday - saturday == 23 * 3600


def test_a_cron_time_the_dst_change_skips_fires_once_after_the_gap() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", tz="Europe/Paris")
    saturday = at("2026-03-28T02:30:00+01:00")
    # 02:30 does not exist on 29 March in Paris (02:00 -> 03:00): cronsim
    # fires at the first moment after the gap, once.
    sunday = spec.next_due(saturday, saturday)
    assert utc(sunday) == "2026-03-29T01:00:00+00:00"
    assert utc(spec.next_due(sunday, sunday)) == "2026-03-30T00:30:00+00:00"


def test_a_cron_time_the_dst_change_repeats_fires_once() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", tz="Europe/Paris")
    saturday = at("2026-10-24T02:30:00+02:00")
    sunday = spec.next_due(saturday, saturday)
    # 02:30 happens twice on 25 October (02:30+02:00, then 02:30+01:00): one fire.
    assert utc(sunday) == "2026-10-25T00:30:00+00:00"
    assert utc(spec.next_due(sunday, sunday)) == "2026-10-26T01:30:00+00:00"


def test_missed_cron_fires_collapse_into_one() -> None:
    spec = ScheduleSpec(cron="*/5 * * * *")
    due = at("2026-01-01T10:00:00+00:00")
    back = at("2026-01-01T12:07:30+00:00")  # two hours of fires missed
    assert utc(spec.next_due(due, back)) == "2026-01-01T12:10:00+00:00"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({}, "one of every"),
        ({"every": 5, "cron": "* * * * *"}, "one of every"),
        ({"every": MIN_EVERY / 2}, "every must be a finite number >= 1"),
        ({"every": 0}, "every must be a finite number >= 1"),
        ({"every": -3}, "every must be a finite number >= 1"),
        ({"every": float("nan")}, "every must be a finite number"),
        ({"every": float("inf")}, "every must be a finite number"),
        ({"every": True}, "every is a number of seconds"),
        ({"every": "5"}, "every is a number of seconds"),
        ({"cron": "nope"}, "does not parse"),
        ({"cron": "61 * * * *"}, "does not parse"),
        ({"cron": "0 0 30 2 *"}, "does not parse"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus_Mons"}, "unknown time zone"),
        ({"cron": "* * * * *", "tz": ""}, "unknown time zone"),
        ({"cron": "* * * * *", "tz": "../etc/passwd"}, "unknown time zone"),
        ({"every": 5, "tz": "Europe/Paris"}, "tz goes with cron"),
    ],
)
def test_a_schedule_that_cannot_fire_is_refused_with_its_reason(
    spec: dict[str, Any], reason: str
) -> None:
    with pytest.raises(InvalidSchedule, match=reason):
        ScheduleSpec(**spec).check()


def test_a_schedule_that_can_fire_passes() -> None:
    for spec in (
        ScheduleSpec(every=MIN_EVERY),
        ScheduleSpec(every=86400),
        ScheduleSpec(cron="0 9 * * 1-5", tz="Europe/Paris"),
        ScheduleSpec(cron="0 0 L * *", tz="America/New_York"),
    ):
        spec.check()
