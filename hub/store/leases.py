"""Which hub serves which deployment, when several hubs share one PostgreSQL.

Any hub accepts mail and serves reads; exactly one at a time delivers a
deployment's dispatches and takes its sidecar's requests: the hub holding
the deployment's lease, a row of ``hub_lease`` (migration 13, PostgreSQL
only: one SQLite file has one hub). A lease lasts ``ttl`` seconds past its
last renewal; ``token`` grows by one at every change of holder, and every
delivery write checks it (:func:`check_lease`), so a hub that lost its
lease (paused past the ttl, cut off) changes nothing any more even before
it notices.

A role (``hub_role``) is a lease on a job only one hub may do at a time,
whichever: the outbound relay (``relay``), which must never send a mail
that another hub is sending.

``hub_node`` lists the live hubs, each renewed with its leases, so a hub
takes only its fair share of the deployments and gives back what is above
it when another hub joins.

The holder also writes, with each renewal, what only it knows of the
deployment (``health``: whether its sidecar answers, the last delivery
error, the stuck dispatches) for the other hubs to answer with.

Times are the database's clock (``clock_timestamp()``), the one clock every
hub shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runtime import Connection

from .._errors import LeaseLost
from .reads import fetch_all, fetch_one

LEASES_SCHEMA = """
CREATE TABLE hub_node (
  id         TEXT PRIMARY KEY,
  http_url   TEXT NOT NULL DEFAULT '',
  started_at DOUBLE PRECISION NOT NULL,
  expires_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE hub_lease (
  deployment_id TEXT PRIMARY KEY,
  hub_id        TEXT NOT NULL,
  token         BIGINT NOT NULL,
  expires_at    DOUBLE PRECISION NOT NULL,
  health        TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX hub_lease_by_hub ON hub_lease (hub_id);
CREATE TABLE hub_role (
  name       TEXT PRIMARY KEY,
  hub_id     TEXT NOT NULL,
  token      BIGINT NOT NULL,
  expires_at DOUBLE PRECISION NOT NULL
);
"""
"""Migration 13 on PostgreSQL (nothing on SQLite)."""

_NOW = "extract(epoch FROM clock_timestamp())"


@dataclass(frozen=True)
class LeaseRound:
    """What one :func:`renew_and_take` left this hub with."""

    held: dict[str, int]  # deployment id -> token
    hubs: int  # live hubs, this one included
    roles: frozenset[str] = frozenset()  # filled in by the caller (hold_role)


async def renew_and_take(
    db: Connection, hub_id: str, http_url: str, ttl: float, *, restarted: bool = False
) -> LeaseRound:
    """Inside a write transaction: say this hub is alive, renew its leases,
    take the free or expired leases of live deployments up to its fair share,
    and give back what it holds above that share (to hubs that hold less).

    ``restarted``: the first round of a new process of this hub (same state
    dir, same ``hub_id``): it takes back at once the leases its previous
    process held, expired or not, each with a new token, so that process,
    were it still running somewhere, writes nothing any more."""
    await db.execute(
        "INSERT INTO hub_node (id, http_url, started_at, expires_at)"
        f" VALUES (?, ?, {_NOW}, {_NOW} + ?) ON CONFLICT (id) DO UPDATE"
        " SET expires_at = EXCLUDED.expires_at, http_url = EXCLUDED.http_url",
        (hub_id, http_url, ttl),
    )
    await db.execute(f"DELETE FROM hub_node WHERE expires_at < {_NOW} - 60")
    if restarted:
        await db.execute(
            f"UPDATE hub_lease SET token = token + 1, expires_at = {_NOW} + ? WHERE hub_id = ?",
            (ttl, hub_id),
        )
    row = await fetch_one(db, f"SELECT COUNT(*) FROM hub_node WHERE expires_at >= {_NOW}")
    hubs = max(int(row[0]) if row else 1, 1)
    await db.execute(
        f"UPDATE hub_lease SET expires_at = {_NOW} + ? WHERE hub_id = ?"
        " AND deployment_id IN (SELECT id FROM deployment WHERE deleted_at IS NULL)",
        (ttl, hub_id),
    )
    await db.execute(
        "DELETE FROM hub_lease WHERE deployment_id IN"
        " (SELECT id FROM deployment WHERE deleted_at IS NOT NULL)"
    )
    live = await fetch_one(db, "SELECT COUNT(*) FROM deployment WHERE deleted_at IS NULL")
    share = math.ceil((int(live[0]) if live else 0) / hubs)
    held = await _held(db, hub_id)
    if len(held) < share:
        # Free ones first, then those whose holder stopped renewing; the
        # row lock of the upsert makes two hubs never take one lease twice.
        for (dep,) in await fetch_all(
            db,
            "SELECT d.id FROM deployment d LEFT JOIN hub_lease l ON l.deployment_id = d.id"
            f" WHERE d.deleted_at IS NULL AND (l.hub_id IS NULL OR l.expires_at < {_NOW})"
            " ORDER BY l.hub_id IS NOT NULL, d.id LIMIT ?",
            (share - len(held),),
        ):
            await db.execute(
                "INSERT INTO hub_lease (deployment_id, hub_id, token, expires_at)"
                f" VALUES (?, ?, 1, {_NOW} + ?) ON CONFLICT (deployment_id) DO UPDATE"
                " SET hub_id = EXCLUDED.hub_id, token = hub_lease.token + 1,"
                " expires_at = EXCLUDED.expires_at"
                f" WHERE hub_lease.expires_at < {_NOW}",
                (dep, hub_id, ttl),
            )
    elif len(held) > share + 1 and hubs > 1:
        # More than a fair share (another hub joined): let the excess expire
        # now, for the hubs below their share to take at their next round.
        await db.execute(
            f"UPDATE hub_lease SET expires_at = {_NOW} - 1 WHERE deployment_id IN"
            " (SELECT deployment_id FROM hub_lease WHERE hub_id = ?"
            " ORDER BY deployment_id DESC LIMIT ?)",
            (hub_id, len(held) - share),
        )
    return LeaseRound(await _held(db, hub_id), hubs)


async def hold_role(db: Connection, name: str, hub_id: str, ttl: float) -> bool:
    """Inside a write transaction: renew role ``name`` if this hub has it,
    take it if it is free or expired; whether this hub has it now."""
    await db.execute(
        "INSERT INTO hub_role (name, hub_id, token, expires_at)"
        f" VALUES (?, ?, 1, {_NOW} + ?) ON CONFLICT (name) DO UPDATE"
        " SET hub_id = EXCLUDED.hub_id, expires_at = EXCLUDED.expires_at,"
        " token = hub_role.token + (hub_role.hub_id <> EXCLUDED.hub_id)::int"
        f" WHERE hub_role.hub_id = EXCLUDED.hub_id OR hub_role.expires_at < {_NOW}",
        (name, hub_id, ttl),
    )
    row = await fetch_one(db, "SELECT hub_id FROM hub_role WHERE name = ?", (name,))
    return row is not None and row[0] == hub_id


async def share_health(db: Connection, hub_id: str, health: dict[str, str]) -> dict[str, str]:
    """Inside a write transaction: record this hub's view (JSON text per
    deployment it holds); every live lease's view, this hub's included."""
    await db.executemany(
        "UPDATE hub_lease SET health = ? WHERE deployment_id = ? AND hub_id = ?",
        [(view, dep, hub_id) for dep, view in sorted(health.items())],
    )
    rows = await fetch_all(
        db, f"SELECT deployment_id, health FROM hub_lease WHERE expires_at >= {_NOW}"
    )
    return {str(dep): str(view) for dep, view in rows}


async def _held(db: Connection, hub_id: str) -> dict[str, int]:
    rows = await fetch_all(
        db,
        f"SELECT deployment_id, token FROM hub_lease WHERE hub_id = ? AND expires_at >= {_NOW}",
        (hub_id,),
    )
    return {str(dep): int(token) for dep, token in rows}


async def release_all(db: Connection, hub_id: str) -> None:
    """A hub stopping: its leases free at once, and it is no longer live."""
    await db.execute(f"UPDATE hub_lease SET expires_at = {_NOW} - 1 WHERE hub_id = ?", (hub_id,))
    await db.execute(f"UPDATE hub_role SET expires_at = {_NOW} - 1 WHERE hub_id = ?", (hub_id,))
    await db.execute("DELETE FROM hub_node WHERE id = ?", (hub_id,))


async def check_lease(db: Connection, deployment_id: str, hub_id: str, token: int) -> None:
    """Inside a write transaction: raise ``LeaseLost`` unless this hub
    still holds the deployment's lease with ``token``. The row is locked
    until the transaction ends, so the lease cannot change hands before the
    write it guards commits."""
    row = await fetch_one(
        db,
        "SELECT hub_id, token FROM hub_lease WHERE deployment_id = ? FOR UPDATE",
        (deployment_id,),
    )
    if row is None or row[0] != hub_id or int(row[1]) != token:
        raise LeaseLost(f"{deployment_id}: lease {token} of {hub_id} is no longer held")
