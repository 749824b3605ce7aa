"""Schema migrations: an ordered list, applied at boot, each exactly once.

``schema_version`` holds one row: the highest version applied. Each
migration runs in its own ``BEGIN IMMEDIATE`` transaction together with its
version bump, and the version is re-read inside that transaction, so a
crash leaves the database before or after a migration, and two processes
opening the same file cannot both apply one. A fresh database walks the
same path as one release 1 left behind: migration 1 creates release 1's
schema (docs/design.md section 6), migration 2 turns it into this release's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiosqlite
import anyio

from .._errors import MigrationError
from .changes import add_change_feed
from .leases import LEASES_SCHEMA
from .outbox import add_outbound_mail
from .producers import add_producers
from .schema import (
    INLINE_DIGEST_PG,
    ApprovalStatus,
    DispatchStatus,
    add_dead_letter_deployment,
    add_inline_digest,
    add_nats_user,
    add_owner_home,
    add_raw_message,
    add_retention_indexes,
    add_run_step,
    create_v1,
    migrate_v1_to_v2,
)
from .schema_pg import BASELINE
from .versions import add_workflow_versions

__all__ = [
    "LATEST",
    "MIGRATIONS",
    "ApprovalStatus",
    "DispatchStatus",
    "apply_migrations",
    "current_version",
    "migrations_after",
    "pending_migrations",
    "read_version",
]


Step = Callable[[aiosqlite.Connection], Awaitable[None]]


@dataclass(frozen=True)
class Migration:
    """One step of the schema: ``step`` on SQLite, the ``postgres`` script on
    PostgreSQL ("": nothing to do there)."""

    version: int
    name: str
    step: Step
    postgres: str = ""


async def nothing(db: aiosqlite.Connection) -> None:
    """A migration with nothing to do on SQLite (one file has one hub: no leases)."""


# PostgreSQL begins at schema 12: its migration 1 is the whole schema 12, and
# 2-12 are in it (schema_pg.py). Later migrations give both.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "0001_release1_schema", create_v1, postgres=BASELINE),
    Migration(2, "0002_release2_schema", migrate_v1_to_v2),
    Migration(3, "0003_dead_letter_deployment", add_dead_letter_deployment),
    Migration(4, "0004_owner_home", add_owner_home),
    Migration(5, "0005_nats_user", add_nats_user),
    Migration(6, "0006_retention_indexes", add_retention_indexes),
    Migration(7, "0007_run_step", add_run_step),
    Migration(8, "0008_outbound_mail", add_outbound_mail),
    Migration(9, "0009_workflow_versions", add_workflow_versions),
    Migration(10, "0010_producers", add_producers),
    Migration(11, "0011_change_feed", add_change_feed),
    Migration(12, "0012_raw_message", add_raw_message),
    Migration(13, "0013_hub_leases", nothing, postgres=LEASES_SCHEMA),
    Migration(14, "0014_inline_digest", add_inline_digest, postgres=INLINE_DIGEST_PG),
)
LATEST = MIGRATIONS[-1].version


async def _has_table(db: aiosqlite.Connection, name: str) -> bool:
    async with db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ) as cur:
        return await cur.fetchone() is not None


async def current_version(db: aiosqlite.Connection) -> int:
    """The applied version: 0 for a database without ``schema_version``."""
    if not await _has_table(db, "schema_version"):
        return 0
    async with db.execute("SELECT MAX(version) FROM schema_version") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


async def _set_version(db: aiosqlite.Connection, version: int) -> None:
    await db.execute("DELETE FROM schema_version")
    await db.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))


OnStep = Callable[[int, int, str], object]
"""``on_step(done, total, name)``: migration ``name`` was committed, the
``done``-th of ``total`` pending ones."""


async def apply_migrations(db: aiosqlite.Connection, on_step: OnStep | None = None) -> list[str]:
    """Apply every pending migration on ``db`` (autocommit mode); return their
    names. Each one committed is told to ``on_step``."""
    applied: list[str] = []
    start = await current_version(db)
    total = sum(m.version > start for m in MIGRATIONS)
    for migration in MIGRATIONS:
        await db.execute("BEGIN IMMEDIATE")
        try:
            version = await current_version(db)
            if version > LATEST:
                raise MigrationError(
                    f"database schema version {version} is newer than this release ({LATEST})"
                )
            if version < migration.version:
                await migration.step(db)
                await _set_version(db, migration.version)
                applied.append(migration.name)
            await db.execute("COMMIT")
        except BaseException:
            with anyio.CancelScope(shield=True):
                if db.in_transaction:
                    await db.execute("ROLLBACK")
            raise
        if on_step is not None and applied and applied[-1] == migration.name:
            on_step(len(applied), max(total, len(applied)), migration.name)
    return applied


async def read_version(path: Path) -> int:
    """The schema version of the database at ``path``, read-only (0: none yet)."""
    path = Path(path)
    if not path.exists():
        return 0
    try:
        async with aiosqlite.connect(f"file:{path}?mode=ro", uri=True) as db:
            return await current_version(db)
    except sqlite3.Error as exc:
        raise MigrationError(f"cannot read {path}: {exc}") from exc


def migrations_after(version: int) -> list[str]:
    """The names of the migrations a database at ``version`` has yet to apply."""
    return [m.name for m in MIGRATIONS if m.version > version]


async def pending_migrations(path: Path) -> list[str]:
    """Names of the migrations that opening ``path`` would apply (read-only)."""
    version = await read_version(path)
    if version > LATEST:
        raise MigrationError(f"database schema version {version} is newer than {LATEST}")
    return [m.name for m in MIGRATIONS if m.version > version]
