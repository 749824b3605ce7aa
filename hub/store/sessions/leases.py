"""Which hub serves which deployment, when several hubs share one PostgreSQL.

Any hub accepts mail and serves reads; exactly one at a time delivers a
deployment's dispatches and takes its sidecar's requests: the hub holding
the deployment's lease, a row of ``hub_lease`` (migration 13; on SQLite
the tables exist too, from migration 15, and stay empty: one file has one
hub). A lease lasts ``ttl`` seconds past its last renewal; ``token`` grows
by one at every change of holder, and every delivery write checks it (the
fence, ``sessions/fencing.py``), so a hub that lost its lease (paused past
the ttl, cut off) changes nothing any more even before it notices.

A role (``hub_role``) is a lease on a job only one hub may do at a time,
whichever: the outbound relay (``relay``), which must never send a mail
that another hub is sending.

``hub_node`` lists the live hubs, each renewed with its leases, so a hub
takes only its fair share of the deployments and gives back what is above
it when another hub joins.

The holder also writes, with each renewal, what only it knows of the
deployment (``health``: whether its sidecar answers, the last delivery
error, the stuck dispatches) for the other hubs to answer with.

Times are the database's clock (``clock_timestamp()`` on PostgreSQL), the
one clock every hub shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..sql import Statement, Tx, sql

LEASES_SCHEMA = """
CREATE TABLE IF NOT EXISTS hub_node (
  id         TEXT PRIMARY KEY,
  http_url   TEXT NOT NULL DEFAULT '',
  started_at DOUBLE PRECISION NOT NULL,
  expires_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS hub_lease (
  deployment_id TEXT PRIMARY KEY,
  hub_id        TEXT NOT NULL,
  token         BIGINT NOT NULL,
  expires_at    DOUBLE PRECISION NOT NULL,
  health        TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS hub_lease_by_hub ON hub_lease (hub_id);
CREATE TABLE IF NOT EXISTS hub_role (
  name       TEXT PRIMARY KEY,
  hub_id     TEXT NOT NULL,
  token      BIGINT NOT NULL,
  expires_at DOUBLE PRECISION NOT NULL
);
"""
"""Migration 13 on PostgreSQL, and migration 15 on SQLite, which takes the
same text (``DOUBLE PRECISION`` and ``BIGINT`` have REAL and INTEGER
affinity there): one file has one hub, so SQLite's tables stay empty, but
both databases have one schema and every statement here is taken by both."""

_NOW = "(julianday('now') - 2440587.5) * 86400.0"
_NOW_PG = "extract(epoch FROM clock_timestamp())"


def _clocked(text: str) -> Statement:
    """``text`` with ``{now}``, the database's clock, on each database."""
    return sql(text.format(now=_NOW), postgres=text.format(now=_NOW_PG))


_ALIVE = _clocked(
    "INSERT INTO hub_node (id, http_url, started_at, expires_at)"
    " VALUES (?, ?, {now}, {now} + ?) ON CONFLICT (id) DO UPDATE"
    " SET expires_at = EXCLUDED.expires_at, http_url = EXCLUDED.http_url"
)
_FORGET_HUBS = _clocked("DELETE FROM hub_node WHERE expires_at < {now} - 60")
_TAKE_BACK = _clocked(
    "UPDATE hub_lease SET token = token + 1, expires_at = {now} + ? WHERE hub_id = ?"
)
_HUBS = _clocked("SELECT COUNT(*) FROM hub_node WHERE expires_at >= {now}")
_RENEW = _clocked(
    "UPDATE hub_lease SET expires_at = {now} + ? WHERE hub_id = ?"
    " AND deployment_id IN (SELECT id FROM deployment WHERE deleted_at IS NULL)"
)
_FORGET_DELETED = sql(
    "DELETE FROM hub_lease WHERE deployment_id IN"
    " (SELECT id FROM deployment WHERE deleted_at IS NOT NULL)"
)
_LIVE = sql("SELECT COUNT(*) FROM deployment WHERE deleted_at IS NULL")
# Free ones first, then those whose holder stopped renewing.
_FREE = _clocked(
    "SELECT d.id FROM deployment d LEFT JOIN hub_lease l ON l.deployment_id = d.id"
    " WHERE d.deleted_at IS NULL AND (l.hub_id IS NULL OR l.expires_at < {now})"
    " ORDER BY l.hub_id IS NOT NULL, d.id LIMIT ?"
)
# The row lock of the upsert makes two hubs never take one lease twice.
_TAKE = _clocked(
    "INSERT INTO hub_lease (deployment_id, hub_id, token, expires_at)"
    " VALUES (?, ?, 1, {now} + ?) ON CONFLICT (deployment_id) DO UPDATE"
    " SET hub_id = EXCLUDED.hub_id, token = hub_lease.token + 1,"
    " expires_at = EXCLUDED.expires_at WHERE hub_lease.expires_at < {now}"
)
_GIVE_BACK = _clocked(
    "UPDATE hub_lease SET expires_at = {now} - 1 WHERE deployment_id IN"
    " (SELECT deployment_id FROM hub_lease WHERE hub_id = ?"
    " ORDER BY deployment_id DESC LIMIT ?)"
)
_HOLD_ROLE = _clocked(
    "INSERT INTO hub_role (name, hub_id, token, expires_at)"
    " VALUES (?, ?, 1, {now} + ?) ON CONFLICT (name) DO UPDATE"
    " SET hub_id = EXCLUDED.hub_id, expires_at = EXCLUDED.expires_at,"
    " token = hub_role.token + CAST(hub_role.hub_id <> EXCLUDED.hub_id AS INTEGER)"
    " WHERE hub_role.hub_id = EXCLUDED.hub_id OR hub_role.expires_at < {now}"
)
_ROLE_HOLDER = sql("SELECT hub_id FROM hub_role WHERE name = ?")
_SHARE = sql("UPDATE hub_lease SET health = ? WHERE deployment_id = ? AND hub_id = ?")
_HEALTH = _clocked("SELECT deployment_id, health FROM hub_lease WHERE expires_at >= {now}")
_HELD = _clocked(
    "SELECT deployment_id, token FROM hub_lease WHERE hub_id = ? AND expires_at >= {now}"
)
_EXPIRE_LEASES = _clocked("UPDATE hub_lease SET expires_at = {now} - 1 WHERE hub_id = ?")
_EXPIRE_ROLES = _clocked("UPDATE hub_role SET expires_at = {now} - 1 WHERE hub_id = ?")
_GONE = sql("DELETE FROM hub_node WHERE id = ?")


@dataclass(frozen=True)
class LeaseRound:
    """What one :func:`renew_and_take` left this hub with."""

    held: dict[str, int]  # deployment id -> token
    hubs: int  # live hubs, this one included
    roles: frozenset[str] = frozenset()  # filled in by the caller (hold_role)


def renew_and_take(
    tx: Tx, hub_id: str, http_url: str, ttl: float, *, restarted: bool = False
) -> LeaseRound:
    """Inside a write transaction: say this hub is alive, renew its leases,
    take the free or expired leases of live deployments up to its fair share,
    and give back what it holds above that share (to hubs that hold less).

    ``restarted``: the first round of a new process of this hub (same state
    dir, same ``hub_id``): it takes back at once the leases its previous
    process held, expired or not, each with a new token, so that process,
    were it still running somewhere, writes nothing any more."""
    tx.execute(_ALIVE, (hub_id, http_url, ttl))
    tx.execute(_FORGET_HUBS)
    if restarted:
        tx.execute(_TAKE_BACK, (ttl, hub_id))
    row = tx.fetch_one(_HUBS)
    hubs = max(int(row[0]) if row else 1, 1)
    tx.execute(_RENEW, (ttl, hub_id))
    tx.execute(_FORGET_DELETED)
    live = tx.fetch_one(_LIVE)
    share = math.ceil((int(live[0]) if live else 0) / hubs)
    held = _held(tx, hub_id)
    if len(held) < share:
        for (dep,) in tx.fetch_all(_FREE, (share - len(held),)):
            tx.execute(_TAKE, (dep, hub_id, ttl))
    elif len(held) > share + 1 and hubs > 1:
        # More than a fair share (another hub joined): let the excess expire
        # now, for the hubs below their share to take at their next round.
        tx.execute(_GIVE_BACK, (hub_id, len(held) - share))
    return LeaseRound(_held(tx, hub_id), hubs)


def hold_role(tx: Tx, name: str, hub_id: str, ttl: float) -> bool:
    """Inside a write transaction: renew role ``name`` if this hub has it,
    take it if it is free or expired; whether this hub has it now."""
    tx.execute(_HOLD_ROLE, (name, hub_id, ttl))
    row = tx.fetch_one(_ROLE_HOLDER, (name,))
    return row is not None and row[0] == hub_id


def share_health(tx: Tx, hub_id: str, health: dict[str, str]) -> dict[str, str]:
    """Inside a write transaction: record this hub's view (JSON text per
    deployment it holds); every live lease's view, this hub's included."""
    tx.execute_many(_SHARE, [(view, dep, hub_id) for dep, view in sorted(health.items())])
    return {str(dep): str(view) for dep, view in tx.fetch_all(_HEALTH)}


def _held(tx: Tx, hub_id: str) -> dict[str, int]:
    return {str(dep): int(token) for dep, token in tx.fetch_all(_HELD, (hub_id,))}


def release_all(tx: Tx, hub_id: str) -> None:
    """A hub stopping: its leases free at once, and it is no longer live."""
    tx.execute(_EXPIRE_LEASES, (hub_id,))
    tx.execute(_EXPIRE_ROLES, (hub_id,))
    tx.execute(_GONE, (hub_id,))
