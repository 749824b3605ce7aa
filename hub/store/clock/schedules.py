"""Deployments' schedules in the store: added, listed and removed, the
earliest due, and one fire, in the one transaction that moves the schedule
on and accepts its item.

A fire is ``UPDATE schedule SET next_due = <next> WHERE id = ? AND
next_due = <due>``: the hub whose update changes the row owns that fire,
so two hubs (or two rounds of one) fire a due time exactly once. In the
same transaction its ``schedule`` item is accepted through the one accept
function, for the deployment's top-level run (minted on first use, like a
first mail), with the message id ``schedule:<id>:<due!r>``. The next due
time is the first one after *now* (``ScheduleSpec.next_due``): the fires
missed while no hub ran collapse into this one.

A fire its deployment cannot take (the top-level run ended, the deployment
deleted) still moves the schedule on; a deleted deployment's schedules go
with it (``drop_schedules``, called by the delete).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from runtime.schedules import InvalidSchedule, ScheduleSpec
from runtime.wire import SCHEDULE_KIND, Reason, ScheduleFired, new_id

from ..._errors import DeploymentNotLive, HubError, UnknownSchedule
from ..accepting import Accepted, Outcome, Trigger, accept_triggers
from ..sql import Row, Tx, sql

_COLUMNS = "id, deployment_id, every, cron, tz, subject, payload, next_due, created_at"

# Only for a live deployment. On PostgreSQL the row is read FOR SHARE: a
# delete committing meanwhile is waited for, and then seen.
_INSERT = sql(
    f"INSERT INTO schedule ({_COLUMNS})"
    " SELECT ?, id, ?, ?, ?, ?, ?, ?, ? FROM deployment WHERE id = ? AND deleted_at IS NULL",
    postgres=f"INSERT INTO schedule ({_COLUMNS})"
    " SELECT ?, id, ?, ?, ?, ?, ?, ?, ? FROM deployment WHERE id = ? AND deleted_at IS NULL"
    " FOR SHARE",
)
_ONE = sql(f"SELECT {_COLUMNS} FROM schedule WHERE id = ? AND deployment_id = ?")
_OF_DEPLOYMENT = sql(
    f"SELECT {_COLUMNS} FROM schedule WHERE deployment_id = ? ORDER BY created_at, id"
)
_REMOVE = sql("DELETE FROM schedule WHERE id = ? AND deployment_id = ?")
_DROP = sql("DELETE FROM schedule WHERE deployment_id = ?")
_EARLIEST = sql("SELECT MIN(next_due) FROM schedule")
_DUE = sql(f"SELECT {_COLUMNS} FROM schedule WHERE next_due <= ? ORDER BY next_due LIMIT ?")
_MOVE_ON = sql("UPDATE schedule SET next_due = ? WHERE id = ? AND next_due = ?")
_ENDED = sql("DELETE FROM schedule WHERE id = ? AND next_due = ?")

_GONE = frozenset({Reason.DEPLOYMENT_NOT_LIVE, Reason.UNKNOWN_DEPLOYMENT})
"""The rejections of a fire whose deployment is gone: its schedule goes too."""


class ScheduleView(msgspec.Struct, kw_only=True):
    """A schedule as the HTTP API shows it (``payload``: the JSON value)."""

    id: str
    deployment_id: str
    every: float | None
    cron: str | None
    tz: str
    subject: str
    payload: Any
    next_due: float
    created_at: float

    @property
    def spec(self) -> ScheduleSpec:
        return ScheduleSpec(every=self.every, cron=self.cron, tz=self.tz)


@dataclass
class Fire:
    """What one fire did, committed: ``outcome`` is None when another hub
    (or an earlier round) fired that due time, or the schedule is gone."""

    schedule_id: str
    deployment_id: str
    due_at: float
    outcome: Outcome | None = None
    next_due: float | None = None  # None: the schedule was dropped
    woken: set[str] = field(default_factory=set)


def _view(row: Row) -> ScheduleView:
    payload = row["payload"]
    return ScheduleView(
        id=str(row["id"]),
        deployment_id=str(row["deployment_id"]),
        every=row["every"],
        cron=row["cron"],
        tz=str(row["tz"]),
        subject=str(row["subject"]),
        payload=None if payload is None else msgspec.json.decode(bytes(payload)),
        next_due=float(row["next_due"]),
        created_at=float(row["created_at"]),
    )


def add_schedule(
    tx: Tx,
    *,
    deployment_id: str,
    spec: ScheduleSpec,
    subject: str,
    payload: bytes | None,
    now: float,
) -> ScheduleView:
    """Inside a write transaction: a new schedule of a live deployment
    (``DeploymentNotLive`` for a deleted one), first due ``spec.first_due(now)``.
    ``spec`` is checked already; ``payload`` is JSON or None."""
    schedule_id = new_id("sch")
    first = spec.first_due(now)
    params = (schedule_id, spec.every, spec.cron, spec.tz, subject, payload, first, now)
    if tx.execute(_INSERT, (*params, deployment_id)) == 0:
        raise DeploymentNotLive(f"{deployment_id} is deleted: it takes no schedule")
    row = tx.fetch_one(_ONE, (schedule_id, deployment_id))
    assert row is not None
    return _view(row)


def list_schedules(tx: Tx, *, deployment_id: str) -> list[ScheduleView]:
    """The deployment's schedules, oldest first."""
    return [_view(row) for row in tx.fetch_all(_OF_DEPLOYMENT, (deployment_id,))]


def remove_schedule(tx: Tx, *, deployment_id: str, schedule_id: str) -> ScheduleView:
    """Inside a write transaction: the schedule removed, as it was
    (``UnknownSchedule`` unless the deployment has it)."""
    row = tx.fetch_one(_ONE, (schedule_id, deployment_id))
    if row is None or tx.execute(_REMOVE, (schedule_id, deployment_id)) == 0:
        raise UnknownSchedule(f"{deployment_id} has no schedule {schedule_id!r}")
    return _view(row)


def drop_schedules(tx: Tx, deployment_id: str) -> int:
    """Inside the transaction that deletes a deployment: its schedules."""
    return tx.execute(_DROP, (deployment_id,))


def earliest_schedule_due(tx: Tx) -> float | None:
    """The earliest ``next_due`` of any schedule; None without schedules."""
    row = tx.fetch_one(_EARLIEST)
    return None if row is None or row[0] is None else float(row[0])


def due_schedules(tx: Tx, *, now: float, limit: int) -> list[ScheduleView]:
    """At most ``limit`` schedules due at ``now``, the most overdue first."""
    return [_view(row) for row in tx.fetch_all(_DUE, (now, limit))]


def fire_message_id(schedule_id: str, due_at: float) -> str:
    """The message id of the fire of ``schedule_id`` due at ``due_at``."""
    return f"schedule:{schedule_id}:{due_at!r}"


def fire_schedule(tx: Tx, *, schedule: ScheduleView, now: float) -> Fire:
    """Inside a write transaction: fire ``schedule`` for its due time
    ``schedule.next_due``, if no one has, and move it on."""
    due = schedule.next_due
    fire = Fire(schedule_id=schedule.id, deployment_id=schedule.deployment_id, due_at=due)
    try:
        following: float | None = schedule.spec.next_due(due, now)
    except InvalidSchedule:
        following = None  # a cron expression with no time left to match
    if following is None:
        owned = tx.execute(_ENDED, (schedule.id, due))
    else:
        owned = tx.execute(_MOVE_ON, (following, schedule.id, due))
    if owned == 0:
        return fire
    body = ScheduleFired(
        schedule_id=schedule.id,
        due_at=due,
        fired_at=now,
        subject=schedule.subject,
        payload=schedule.payload,
    )
    trigger = Trigger(
        deployment_id=schedule.deployment_id,
        kind=SCHEDULE_KIND,
        message_id=fire_message_id(schedule.id, due),
        subject=schedule.subject,
        body=msgspec.json.encode(body),
    )
    (fire.outcome,), fire.woken = accept_triggers(tx, [trigger])
    fire.next_due = following
    if _gone(fire.outcome) and following is not None:
        tx.execute(_REMOVE, (schedule.id, schedule.deployment_id))
        fire.next_due = None
    return fire


def _gone(outcome: Outcome | None) -> bool:
    if outcome is None or isinstance(outcome, Accepted | HubError):
        return False
    return outcome.reason in _GONE
