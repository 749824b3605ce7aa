"""A deployment's sleep in the store: a Sleep granted in one transaction, the
row a Welcome deletes, a wake requested, and the asleep deployments that
have work.

A Sleep is granted only while nothing waits for the sidecar: no dispatch of
the deployment ``reserved`` (accepted, not yet delivered; a paused
deployment's are kept undelivered on purpose, so they do not count) and no
version waiting to be loaded. On PostgreSQL the grant locks the deployment
row first, as the accepting transaction does (``accepting/lookups.py``), so
a dispatch accepted at the same time either commits first and makes the
grant ``busy``, or commits after the row exists and names the deployment to
``GET /workflows/wakes``; on SQLite ``BEGIN IMMEDIATE`` already orders them.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from ..schema import DispatchStatus
from ..sessions import Fence, check_fence
from ..sql import Tx, sql

_DEPLOYMENT = sql(
    "SELECT paused_at, rollout_version FROM deployment WHERE id = ? AND deleted_at IS NULL",
    postgres="SELECT paused_at, rollout_version FROM deployment"
    " WHERE id = ? AND deleted_at IS NULL FOR UPDATE",
)
_ASLEEP = sql("SELECT since FROM deployment_sleep WHERE deployment_id = ?")
# The status written out, not bound: SQLite compiles a statement that binds
# it again at every run (the table's partial index on a status; docs/hub.md).
_IS_RESERVED = f"status = '{DispatchStatus.RESERVED}'"
_RESERVED = sql(
    f"SELECT 1 FROM workflow_run_dispatch WHERE deployment_id = ? AND {_IS_RESERVED} LIMIT 1"
)
_FALL_ASLEEP = sql("INSERT INTO deployment_sleep (deployment_id, since) VALUES (?, ?)")
_WAKE = sql("DELETE FROM deployment_sleep WHERE deployment_id = ?")
_WAKE_REQUESTED = sql(
    "UPDATE deployment_sleep SET wake_requested = ?"
    " WHERE deployment_id = ? AND wake_requested IS NULL"
)
# The sleep rows lead (CROSS JOIN keeps SQLite's planner to that order; an
# inner join to PostgreSQL's): the asleep deployments are read, not every
# live one.
_LIVE_ASLEEP = """SELECT s.deployment_id, s.since FROM deployment_sleep s
CROSS JOIN deployment d WHERE d.id = s.deployment_id AND d.deleted_at IS NULL"""
_ALL_ASLEEP = sql(f"{_LIVE_ASLEEP} ORDER BY s.deployment_id")
# Work is a reserved dispatch of an unpaused deployment (the dispatch_pending
# index finds one per deployment) or a wake requested.
_HAS_WORK = f"""(s.wake_requested IS NOT NULL OR (d.paused_at IS NULL AND EXISTS (
  SELECT 1 FROM workflow_run_dispatch x WHERE x.deployment_id = s.deployment_id
  AND x.{_IS_RESERVED})))"""
_TO_WAKE = sql(f"{_LIVE_ASLEEP} AND {_HAS_WORK} ORDER BY s.since, s.deployment_id")
# One deployment by its sleep row's key: what a notice of new work costs.
_ONE_TO_WAKE = sql(f"{_LIVE_ASLEEP} AND s.deployment_id = ? AND {_HAS_WORK}")

BUSY_RESERVED = "a dispatch waits for delivery"
BUSY_ROLLOUT = "a version waits to be loaded"


def grant_sleep(tx: Tx, fence: Fence) -> str | None:
    """Inside a write transaction, under the session's ``fence``: put the
    deployment to sleep unless something waits for its sidecar. None when it
    is asleep now (or was already: a repeated grant keeps the first
    ``since``), else why it is busy. Raises as the fence does (``StaleEpoch``,
    ``LeaseLost``)."""
    check_fence(tx, fence)
    dep = fence.deployment_id
    row = tx.fetch_one(_DEPLOYMENT, (dep,))
    if row is None:
        return None  # deleted meanwhile: its sidecar stops either way
    if is_asleep(tx, dep):
        return None
    if row[1] is not None:
        return BUSY_ROLLOUT
    if row[0] is None and tx.fetch_one(_RESERVED, (dep,)) is not None:
        return BUSY_RESERVED
    tx.execute(_FALL_ASLEEP, (dep, time.time()))
    return None


def wake_deployment(tx: Tx, deployment_id: str) -> bool:
    """Inside a write transaction (a Welcome's): the deployment is awake;
    whether it was asleep."""
    return tx.execute(_WAKE, (deployment_id,)) == 1


def is_asleep(tx: Tx, deployment_id: str) -> bool:
    """Whether the deployment has a sleep row (read or write transaction)."""
    return tx.fetch_one(_ASLEEP, (deployment_id,)) is not None


def request_wake(tx: Tx, deployment_id: str) -> bool:
    """Inside a write transaction: an asleep deployment must wake although no
    dispatch waits (a version to load); whether this asked first. A
    deployment that is awake is left as it is."""
    return tx.execute(_WAKE_REQUESTED, (time.time(), deployment_id)) == 1


def asleep_deployments(tx: Tx) -> list[str]:
    """The ids of the live deployments that are asleep."""
    return [str(row[0]) for row in tx.fetch_all(_ALL_ASLEEP)]


def deployments_to_wake(tx: Tx, among: Collection[str] | None = None) -> list[str]:
    """The asleep live deployments that have work, longest asleep first;
    ``among``: only these are looked at, each by its key (a few named by a
    notice, where the whole list reads every asleep deployment)."""
    if among is None:
        return [str(row[0]) for row in tx.fetch_all(_TO_WAKE)]
    found: list[tuple[float, str]] = []
    for dep in sorted(among):
        row = tx.fetch_one(_ONE_TO_WAKE, (dep,))
        if row is not None:
            found.append((float(row[1]), str(row[0])))
    return [dep for _, dep in sorted(found)]
