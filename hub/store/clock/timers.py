"""The statements of the runs' pending timers: set (or moved), cancelled,
dropped with their run or deployment, the earliest due, and a page of due
rows claimed by a conditional delete.

A ``timer`` row is either a run's ``ctx.set_timer`` (kind ``timer``) or the
expiry of an approval asked with a timeout (kind ``approval``, named by the
approval's id). Its ``id`` is the id of the event that set it, so it is new
with every set and the item a fire becomes (message id ``timer:<id>``) is
accepted once. The rules of firing are the loop's (``hub.clock.timers``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..sql import Tx, json_array, sql
from .schema import TIMER_KIND


class DueTimer(NamedTuple):
    """A pending timer as the loop fires it."""

    id: str
    deployment_id: str
    run_id: str
    kind: str
    name: str
    due_at: float
    payload: bytes | None  # the payload as JSON (None: none)


class PendingTimer(NamedTuple):
    """A run's pending ``ctx.set_timer`` as ``GET /runs/{id}`` shows it."""

    name: str
    due_at: float
    payload: bytes | None


# Setting a name again moves its timer: a new id (so a new item), due time,
# payload and set time in the same row.
_SET = sql(
    "INSERT INTO timer (id, deployment_id, run_id, kind, name, due_at, payload, set_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, kind, name) DO UPDATE SET"
    " id = excluded.id, due_at = excluded.due_at, payload = excluded.payload,"
    " set_at = excluded.set_at"
)
_CANCEL = sql("DELETE FROM timer WHERE run_id = ? AND kind = ? AND name = ?")
_DROP_RUNS = sql(
    "DELETE FROM timer WHERE run_id IN (SELECT value FROM json_each(?))",
    postgres="DELETE FROM timer WHERE run_id IN"
    " (SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)
_DROP_DEPLOYMENT = sql("DELETE FROM timer WHERE deployment_id = ?")
# A decided approval's expiry, found through its run (the unique index).
_EARLIEST = sql("SELECT MIN(due_at) FROM timer")
# Due order; a tie by the order they were set in, then by id (stable).
_DUE = sql(
    "SELECT id, deployment_id, run_id, kind, name, due_at, payload FROM timer"
    " WHERE due_at <= ? ORDER BY due_at, set_at, id LIMIT ?"
)
# Each row is this round's only if this delete removed it: another hub's
# round (or a cancel, a move, the run's end) that got there first wins.
_CLAIM = sql(
    "DELETE FROM timer WHERE id IN (SELECT value FROM json_each(?)) RETURNING id",
    postgres="DELETE FROM timer WHERE id IN"
    " (SELECT value FROM json_array_elements_text(CAST(? AS json))) RETURNING id",
)
_OF_RUN = sql(
    "SELECT name, due_at, payload FROM timer WHERE run_id = ? AND kind = ?"
    " ORDER BY due_at, set_at, id"
)
_COUNT = sql("SELECT kind, COUNT(*) FROM timer GROUP BY kind ORDER BY kind")


def set_timer(
    tx: Tx,
    *,
    timer_id: str,
    deployment_id: str,
    run_id: str,
    kind: str,
    name: str,
    due_at: float,
    payload: bytes | None,
    now: float,
) -> None:
    """Set the run's timer ``(kind, name)`` due at ``due_at``, moving it if it
    is pending already; ``timer_id`` is the id of the item it will become."""
    params = (timer_id, deployment_id, run_id, kind, name, due_at, payload, now)
    tx.execute(_SET, params)


def cancel_timer(tx: Tx, run_id: str, name: str) -> bool:
    """Drop the run's pending timer ``name``; whether it was pending."""
    return tx.execute(_CANCEL, (run_id, TIMER_KIND, name)) == 1


def drop_run_timers(tx: Tx, run_ids: Iterable[str]) -> None:
    """Drop every pending timer of ``run_ids``: they ended."""
    ids = sorted(set(run_ids))
    if ids:
        tx.execute(_DROP_RUNS, (json_array(ids),))


def drop_deployment_timers(tx: Tx, deployment_id: str) -> None:
    """Drop every pending timer of the deployment: it is deleted."""
    tx.execute(_DROP_DEPLOYMENT, (deployment_id,))


def earliest_timer_due(tx: Tx) -> float | None:
    """When the earliest pending timer is due (None: none is pending)."""
    row = tx.fetch_one(_EARLIEST)
    return None if row is None or row[0] is None else float(row[0])


def due_timers(tx: Tx, now: float, limit: int) -> list[DueTimer]:
    """At most ``limit`` timers due by ``now``, in due order."""
    return [
        DueTimer(r[0], r[1], r[2], r[3], r[4], float(r[5]), None if r[6] is None else bytes(r[6]))
        for r in tx.fetch_all(_DUE, (now, limit))
    ]


def claim_timers(tx: Tx, timer_ids: Iterable[str]) -> set[str]:
    """Delete the timers ``timer_ids``; the ids this delete removed."""
    ids = sorted(set(timer_ids))
    if not ids:
        return set()
    return {str(row[0]) for row in tx.fetch_all(_CLAIM, (json_array(ids),))}


def run_timers(tx: Tx, run_id: str) -> list[PendingTimer]:
    """The run's pending ``ctx.set_timer`` timers, earliest first."""
    return [
        PendingTimer(str(r[0]), float(r[1]), None if r[2] is None else bytes(r[2]))
        for r in tx.fetch_all(_OF_RUN, (run_id, TIMER_KIND))
    ]


def count_timers(tx: Tx) -> dict[str, int]:
    """Pending timers by kind (``timer``, ``approval``)."""
    return {str(kind): int(n) for kind, n in tx.fetch_all(_COUNT)}
