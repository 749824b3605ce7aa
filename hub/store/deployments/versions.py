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
the sidecar load it, then :func:`finish_rollout` makes it active (and
resumes every suspended run of the deployment), or marks it refused with
the sidecar's reason, in one transaction. Being a row, a requested rollout
survives a hub restart. A rollout to an asleep deployment requests its wake
(``hub.store.sleep``): its sidecar loads the version once it is back.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from enum import StrEnum

import msgspec

from runtime import Claim, Sources
from runtime.wire import DeploymentStatus

from ..._errors import DeploymentNotLive, UnknownVersion
from ..failures import resume_suspended
from ..schema import add_columns
from ..sleep import request_wake
from ..sql import Row, SqliteTx, Tx, sql


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


_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS deployment_version (deployment_id TEXT NOT NULL,"
    " version INTEGER NOT NULL, digest TEXT NOT NULL, size INTEGER NOT NULL,"
    " entrypoint TEXT NOT NULL, status TEXT NOT NULL, error TEXT,"
    " created_at REAL NOT NULL, activated_at REAL, PRIMARY KEY (deployment_id, version))",
    "CREATE INDEX IF NOT EXISTS deployment_version_digest ON deployment_version (digest)",
)
_VERSION_COLUMNS = {
    "deployment": {
        "version": "ALTER TABLE deployment ADD COLUMN version INTEGER NOT NULL DEFAULT 1",
        "rollout_version": "ALTER TABLE deployment ADD COLUMN rollout_version INTEGER",
    },
    "workflow_run_dispatch": {
        "version": "ALTER TABLE workflow_run_dispatch ADD COLUMN version INTEGER",
    },
    "workflow_run": {
        "version": "ALTER TABLE workflow_run ADD COLUMN version INTEGER NOT NULL DEFAULT 0",
    },
}
_UNVERSIONED = (
    "SELECT id, sources, entrypoint, created_at FROM deployment d WHERE NOT EXISTS"
    " (SELECT 1 FROM deployment_version v WHERE v.deployment_id = d.id)"
)

_INSERT_BLOB = sql(
    "INSERT OR IGNORE INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
    postgres="INSERT INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING",
)
_INSERT_VERSION = sql(
    "INSERT INTO deployment_version (deployment_id, version, digest, size, entrypoint,"
    " status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_FIRST_ACTIVE = sql(
    "UPDATE deployment_version SET status = ?, activated_at = ?"
    " WHERE deployment_id = ? AND version = 1"
)
_NEXT_VERSION = sql(
    "SELECT COALESCE(MAX(version), 0) + 1 FROM deployment_version WHERE deployment_id = ?"
)
_STATUS = sql("SELECT status FROM deployment_version WHERE deployment_id = ? AND version = ?")
_NO_ROLLOUT = sql("UPDATE deployment SET rollout_version = NULL WHERE id = ?")
_LOADING = sql(
    "UPDATE deployment_version SET status = ?, error = NULL WHERE deployment_id = ? AND version = ?"
)
_ROLLOUT = sql("UPDATE deployment SET rollout_version = ? WHERE id = ?")
_SUPERSEDE = sql(
    "UPDATE deployment_version SET status = ? WHERE deployment_id = ? AND status = ?"
    " AND version = (SELECT rollout_version FROM deployment WHERE id = ?)"
)
# The anchor's status written out: bound, SQLite would compile the statement
# again at every run (the run table's partial index on a status).
_LIVE = sql(
    "SELECT d.version FROM deployment d JOIN workflow_run a ON a.id = d.id"
    " AND a.is_anchor = 1 WHERE d.id = ? AND d.deleted_at IS NULL"
    f" AND a.status = '{DeploymentStatus.DEPLOYED}'"
)
# ``deployment.entrypoint`` follows the active version (the deployment view's).
_FINISH = sql(
    "UPDATE deployment SET rollout_version = NULL, version = CASE WHEN :refused THEN version"
    " ELSE :version END, entrypoint = CASE WHEN :refused THEN entrypoint ELSE (SELECT"
    " v.entrypoint FROM deployment_version v WHERE v.deployment_id = deployment.id"
    " AND v.version = :version) END"
    " WHERE id = :deployment AND rollout_version = :version AND deleted_at IS NULL"
)
_READY = sql(
    "UPDATE deployment_version SET status = ?, error = NULL, activated_at = ?"
    " WHERE deployment_id = ? AND version = ?"
)
_REFUSED = sql(
    "UPDATE deployment_version SET status = ?, error = ? WHERE deployment_id = ? AND version = ?"
)
_ENTRYPOINT = sql("SELECT entrypoint FROM deployment WHERE id = ?")
_PENDING = sql(
    "SELECT d.id, v.version, v.digest, v.size FROM deployment d JOIN deployment_version v"
    " ON v.deployment_id = d.id AND v.version = d.rollout_version"
    " WHERE d.rollout_version IS NOT NULL AND d.deleted_at IS NULL"
)
_VIEW = (
    "SELECT v.deployment_id, v.version, v.status, v.version = d.version AS active,"
    " v.entrypoint, v.digest, v.size, v.error, v.created_at, v.activated_at"
    " FROM deployment_version v JOIN deployment d ON d.id = v.deployment_id"
)
_VIEWS = sql(_VIEW + " WHERE v.deployment_id = ? ORDER BY v.version")
_ONE_VIEW = sql(_VIEW + " WHERE v.deployment_id = ? AND v.version = ?")


def add_workflow_versions(conn: sqlite3.Connection) -> None:
    """Migration 9: versions. Every deployment's code so far becomes its
    version 1 (active), its blob written from ``deployment.sources``; older
    dispatches keep a NULL version, read as 1. Idempotent on its own."""
    for statement in _VERSION_TABLE:
        conn.execute(statement)
    for table, columns in _VERSION_COLUMNS.items():
        add_columns(conn, table, columns)
    tx = SqliteTx(conn)
    for row in conn.execute(_UNVERSIONED).fetchall():
        data = str(row["sources"]).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        _insert(tx, row["id"], 1, data, digest, row["entrypoint"], row["created_at"])
        tx.execute(_FIRST_ACTIVE, (VersionStatus.READY, row["created_at"], row["id"]))


def _insert(
    tx: Tx, deployment_id: str, version: int, data: bytes, digest: str, entrypoint: str, now: float
) -> None:
    tx.execute(_INSERT_BLOB, (digest, len(data), data, now))
    tx.execute(
        _INSERT_VERSION,
        (deployment_id, version, digest, len(data), entrypoint, VersionStatus.LOADING, now),
    )


def insert_first_version(tx: Tx, deployment_id: str, sources: Sources, now: float) -> None:
    """Inside the create transaction: the deployment's version 1, active."""
    data, digest = encode_sources(sources)
    _insert(tx, deployment_id, 1, data, digest, sources.entrypoint, now)
    tx.execute(_FIRST_ACTIVE, (VersionStatus.READY, now, deployment_id))


def add_version(tx: Tx, deployment_id: str, sources: Sources) -> int:
    """Inside a write transaction: the next version of a live deployment,
    asked for as its rollout (superseding one still in progress)."""
    _live(tx, deployment_id)
    row = tx.fetch_one(_NEXT_VERSION, (deployment_id,))
    version = int(row[0]) if row else 1
    data, digest = encode_sources(sources)
    _insert(tx, deployment_id, version, data, digest, sources.entrypoint, time.time())
    _request(tx, deployment_id, version)
    return version


def request_rollout(tx: Tx, deployment_id: str, version: int) -> bool:
    """Inside a write transaction: ask for ``version`` to become active again
    (a rollback, or a retry of a refused one). False when it already is."""
    active = _live(tx, deployment_id)
    if tx.fetch_one(_STATUS, (deployment_id, version)) is None:
        raise UnknownVersion(f"{deployment_id} has no version {version}")
    if version == active:
        # Asking for the active version cancels a rollout away from it.
        _supersede(tx, deployment_id)
        tx.execute(_NO_ROLLOUT, (deployment_id,))
        return False
    tx.execute(_LOADING, (VersionStatus.LOADING, deployment_id, version))
    _request(tx, deployment_id, version)
    return True


def _request(tx: Tx, deployment_id: str, version: int) -> None:
    _supersede(tx, deployment_id)
    tx.execute(_ROLLOUT, (version, deployment_id))
    # Asleep, its sidecar loads nothing: it is woken to (``hub.store.sleep``).
    request_wake(tx, deployment_id)


def _supersede(tx: Tx, deployment_id: str) -> None:
    tx.execute(
        _SUPERSEDE,
        (VersionStatus.SUPERSEDED, deployment_id, VersionStatus.LOADING, deployment_id),
    )


def _live(tx: Tx, deployment_id: str) -> int:
    """The active version of a live deployment; raises for any other."""
    row = tx.fetch_one(_LIVE, (deployment_id,))
    if row is None:
        raise DeploymentNotLive(f"deployment {deployment_id} is not live")
    return int(row[0])


def finish_rollout(tx: Tx, deployment_id: str, version: int, error: str | None) -> bool:
    """Inside a write transaction: the sidecar's answer to a rollout. False
    when that rollout is no longer the one asked for (superseded meanwhile)."""
    params = {"refused": error is not None, "version": version, "deployment": deployment_id}
    if tx.execute(_FINISH, params) != 1:
        return False
    if error is None:
        tx.execute(_READY, (VersionStatus.READY, time.time(), deployment_id, version))
        # A new version may be the fix: every suspended run tries again with it.
        resume_suspended(tx, deployment_id)
    else:
        tx.execute(_REFUSED, (VersionStatus.REFUSED, error, deployment_id, version))
    return True


def active_entrypoint(tx: Tx, deployment_id: str) -> str:
    """The active version's entrypoint (``deployment.entrypoint`` follows it)."""
    row = tx.fetch_one(_ENTRYPOINT, (deployment_id,))
    if row is None:
        raise DeploymentNotLive(f"no deployment {deployment_id}")
    return str(row[0])


def pending_rollouts(tx: Tx) -> list[Rollout]:
    return [
        Rollout(
            deployment_id=r["id"],
            version=r["version"],
            code=Claim(digest=r["digest"], size=r["size"]),
        )
        for r in tx.fetch_all(_PENDING)
    ]


def list_versions(tx: Tx, deployment_id: str) -> list[VersionView]:
    return [_view(r) for r in tx.fetch_all(_VIEWS, (deployment_id,))]


def get_version(tx: Tx, deployment_id: str, version: int) -> VersionView:
    row = tx.fetch_one(_ONE_VIEW, (deployment_id, version))
    if row is None:
        raise UnknownVersion(f"{deployment_id} has no version {version}")
    return _view(row)


def _view(row: Row) -> VersionView:
    fields = dict(zip(row.keys(), row, strict=True))
    fields["active"] = bool(fields["active"])
    return VersionView(**fields)
