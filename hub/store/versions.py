"""Workflow versions: each deployment's code, numbered, and which one is active.

A version's sources (``Sources`` as JSON) are kept as a blob under their
digest (content-addressed: the same code twice is stored once), named by a
``deployment_version`` row. ``deployment.version`` is the active version:
the accept transaction stamps it on every dispatch it writes, so the switch
point is a place in the deployment's ``seq`` order, decided under the same
write lock as ``seq`` itself, and every item is processed wholly by the
version stamped on it (docs/versions.md).

A version becomes active through a rollout: ``deployment.rollout_version``
names the version asked for; the rollout driver (``hub.wire.rollout``) has
the sidecar load it, then :func:`finish_rollout` makes it active, or marks
it refused with the sidecar's reason, in one transaction. Being a row, a
requested rollout survives a hub restart.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from enum import StrEnum

import msgspec

from runtime import Claim, Connection, DeploymentStatus, Sources

from .._errors import DeploymentNotLive, UnknownVersion
from .reads import fetch_all, fetch_one


class VersionStatus(StrEnum):
    LOADING = "loading"  # asked for: the sidecar has not answered yet
    READY = "ready"  # the sidecar loaded it (active, or activable again)
    REFUSED = "refused"  # it did not load: ``error`` says why
    SUPERSEDED = "superseded"  # another rollout was asked for before this one finished


class VersionView(msgspec.Struct, kw_only=True):
    deployment_id: str
    version: int
    status: str
    active: bool
    entrypoint: str
    digest: str
    size: int
    error: str | None
    created_at: float
    activated_at: float | None


class Rollout(msgspec.Struct, kw_only=True, frozen=True):
    """A rollout the driver has to carry out."""

    deployment_id: str
    version: int
    code: Claim


def encode_sources(sources: Sources) -> tuple[bytes, str]:
    """The blob a version's sources are kept as, and its digest."""
    data = msgspec.json.encode(sources)
    return data, "sha256:" + hashlib.sha256(data).hexdigest()


async def add_workflow_versions(db: Connection) -> None:
    """Migration 9: versions. Every deployment's code so far becomes its
    version 1 (active), its blob written from ``deployment.sources``; older
    dispatches keep a NULL version, read as 1. Idempotent on its own."""
    await db.execute(
        "CREATE TABLE IF NOT EXISTS deployment_version (deployment_id TEXT NOT NULL,"
        " version INTEGER NOT NULL, digest TEXT NOT NULL, size INTEGER NOT NULL,"
        " entrypoint TEXT NOT NULL, status TEXT NOT NULL, error TEXT,"
        " created_at REAL NOT NULL, activated_at REAL, PRIMARY KEY (deployment_id, version))"
    )
    await db.execute(
        "CREATE INDEX IF NOT EXISTS deployment_version_digest ON deployment_version (digest)"
    )
    for table, column, kind in (
        ("deployment", "version", "INTEGER NOT NULL DEFAULT 1"),
        ("deployment", "rollout_version", "INTEGER"),
        ("workflow_run_dispatch", "version", "INTEGER"),
        ("workflow_run", "version", "INTEGER NOT NULL DEFAULT 0"),
    ):
        columns = {row[1] for row in await fetch_all(db, f"PRAGMA table_info({table})")}
        if column not in columns:
            await db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    rows = await fetch_all(
        db,
        "SELECT id, sources, entrypoint, created_at FROM deployment d WHERE NOT EXISTS"
        " (SELECT 1 FROM deployment_version v WHERE v.deployment_id = d.id)",
    )
    for row in rows:
        data = str(row["sources"]).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        await _insert(db, row["id"], 1, data, digest, row["entrypoint"], row["created_at"])
        await db.execute(
            "UPDATE deployment_version SET status = ?, activated_at = created_at"
            " WHERE deployment_id = ? AND version = 1",
            (VersionStatus.READY, row["id"]),
        )


async def _insert(
    db: Connection,
    deployment_id: str,
    version: int,
    data: bytes,
    digest: str,
    entrypoint: str,
    now: float,
) -> None:
    await db.execute(
        "INSERT OR IGNORE INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
        (digest, len(data), data, now),
    )
    await db.execute(
        "INSERT INTO deployment_version (deployment_id, version, digest, size, entrypoint,"
        " status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (deployment_id, version, digest, len(data), entrypoint, VersionStatus.LOADING, now),
    )


async def insert_first_version(
    db: Connection, deployment_id: str, sources: Sources, now: float
) -> None:
    """Inside the create transaction: the deployment's version 1, active."""
    data, digest = encode_sources(sources)
    await _insert(db, deployment_id, 1, data, digest, sources.entrypoint, now)
    await db.execute(
        "UPDATE deployment_version SET status = ?, activated_at = ?"
        " WHERE deployment_id = ? AND version = 1",
        (VersionStatus.READY, now, deployment_id),
    )


async def add_version(db: Connection, deployment_id: str, sources: Sources) -> int:
    """Inside a write transaction: the next version of a live deployment,
    asked for as its rollout (superseding one still in progress)."""
    await _live(db, deployment_id)
    row = await fetch_one(
        db,
        "SELECT COALESCE(MAX(version), 0) + 1 FROM deployment_version WHERE deployment_id = ?",
        (deployment_id,),
    )
    version = int(row[0]) if row else 1
    data, digest = encode_sources(sources)
    now = time.time()
    await _insert(db, deployment_id, version, data, digest, sources.entrypoint, now)
    await _request(db, deployment_id, version)
    return version


async def request_rollout(db: Connection, deployment_id: str, version: int) -> bool:
    """Inside a write transaction: ask for ``version`` to become active again
    (a rollback, or a retry of a refused one). False when it already is."""
    active = await _live(db, deployment_id)
    row = await fetch_one(
        db,
        "SELECT status FROM deployment_version WHERE deployment_id = ? AND version = ?",
        (deployment_id, version),
    )
    if row is None:
        raise UnknownVersion(f"{deployment_id} has no version {version}")
    if version == active:
        # Asking for the active version cancels a rollout away from it.
        await _supersede(db, deployment_id)
        await db.execute(
            "UPDATE deployment SET rollout_version = NULL WHERE id = ?", (deployment_id,)
        )
        return False
    await db.execute(
        "UPDATE deployment_version SET status = ?, error = NULL"
        " WHERE deployment_id = ? AND version = ?",
        (VersionStatus.LOADING, deployment_id, version),
    )
    await _request(db, deployment_id, version)
    return True


async def _request(db: Connection, deployment_id: str, version: int) -> None:
    await _supersede(db, deployment_id)
    await db.execute(
        "UPDATE deployment SET rollout_version = ? WHERE id = ?", (version, deployment_id)
    )


async def _supersede(db: Connection, deployment_id: str) -> None:
    await db.execute(
        "UPDATE deployment_version SET status = ? WHERE deployment_id = ? AND status = ?"
        " AND version = (SELECT rollout_version FROM deployment WHERE id = ?)",
        (VersionStatus.SUPERSEDED, deployment_id, VersionStatus.LOADING, deployment_id),
    )


async def _live(db: Connection, deployment_id: str) -> int:
    """The active version of a live deployment; raises for any other."""
    row = await fetch_one(
        db,
        "SELECT d.version FROM deployment d JOIN workflow_run a ON a.id = d.id"
        " AND a.is_anchor = 1 WHERE d.id = ? AND d.deleted_at IS NULL AND a.status = ?",
        (deployment_id, DeploymentStatus.DEPLOYED),
    )
    if row is None:
        raise DeploymentNotLive(f"deployment {deployment_id} is not live")
    return int(row[0])


async def finish_rollout(
    db: Connection, deployment_id: str, version: int, error: str | None
) -> bool:
    """Inside a write transaction: the sidecar's answer to a rollout. False
    when that rollout is no longer the one asked for (superseded meanwhile)."""
    # ``deployment.entrypoint`` follows the active version (the deployment view's).
    cur = await db.execute(
        "UPDATE deployment SET rollout_version = NULL, version = CASE WHEN ? THEN version"
        " ELSE ? END, entrypoint = CASE WHEN ? THEN entrypoint ELSE (SELECT v.entrypoint"
        " FROM deployment_version v WHERE v.deployment_id = deployment.id AND v.version = ?)"
        " END WHERE id = ? AND rollout_version = ? AND deleted_at IS NULL",
        (error is not None, version, error is not None, version, deployment_id, version),
    )
    if cur.rowcount != 1:
        return False
    if error is None:
        await db.execute(
            "UPDATE deployment_version SET status = ?, error = NULL, activated_at = ?"
            " WHERE deployment_id = ? AND version = ?",
            (VersionStatus.READY, time.time(), deployment_id, version),
        )
    else:
        await db.execute(
            "UPDATE deployment_version SET status = ?, error = ?"
            " WHERE deployment_id = ? AND version = ?",
            (VersionStatus.REFUSED, error, deployment_id, version),
        )
    return True


async def active_entrypoint(db: Connection, deployment_id: str) -> str:
    """The active version's entrypoint (``deployment.entrypoint`` follows it)."""
    row = await fetch_one(db, "SELECT entrypoint FROM deployment WHERE id = ?", (deployment_id,))
    if row is None:
        raise DeploymentNotLive(f"no deployment {deployment_id}")
    return str(row[0])


async def pending_rollouts(db: Connection) -> list[Rollout]:
    rows = await fetch_all(
        db,
        "SELECT d.id, v.version, v.digest, v.size FROM deployment d JOIN deployment_version v"
        " ON v.deployment_id = d.id AND v.version = d.rollout_version"
        " WHERE d.rollout_version IS NOT NULL AND d.deleted_at IS NULL",
    )
    return [
        Rollout(
            deployment_id=r["id"],
            version=r["version"],
            code=Claim(digest=r["digest"], size=r["size"]),
        )
        for r in rows
    ]


_VIEW = (
    "SELECT v.deployment_id, v.version, v.status, v.version = d.version AS active,"
    " v.entrypoint, v.digest, v.size, v.error, v.created_at, v.activated_at"
    " FROM deployment_version v JOIN deployment d ON d.id = v.deployment_id"
)


async def list_versions(db: Connection, deployment_id: str) -> list[VersionView]:
    rows = await fetch_all(
        db, _VIEW + " WHERE v.deployment_id = ? ORDER BY v.version", (deployment_id,)
    )
    return [_view(r) for r in rows]


async def get_version(db: Connection, deployment_id: str, version: int) -> VersionView:
    row = await fetch_one(
        db, _VIEW + " WHERE v.deployment_id = ? AND v.version = ?", (deployment_id, version)
    )
    if row is None:
        raise UnknownVersion(f"{deployment_id} has no version {version}")
    return _view(row)


def _view(row: sqlite3.Row) -> VersionView:
    fields = dict(zip(row.keys(), row, strict=True))
    fields["active"] = bool(fields["active"])
    return VersionView(**fields)
