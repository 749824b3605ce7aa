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
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from runtime.sqlite import Database

from ..._errors import MigrationError
from ..clock import SCHEDULES_PG, TIMERS_PG, add_schedules, add_timers
from ..deployments import add_producers, add_workflow_versions
from ..feed import DEPLOYMENT_FEED_PG, add_change_feed, add_deployment_feed
from ..mail import MAIL_PG, add_mail
from ..outbound import add_outbound_mail
from ..schema import (
    BASELINE,
    FAILURE_POLICIES_PG,
    INLINE_DIGEST_PG,
    RUN_SETTINGS_PG,
    add_dead_letter_deployment,
    add_failure_policies,
    add_inline_digest,
    add_nats_user,
    add_owner_home,
    add_raw_message,
    add_retention_indexes,
    add_run_settings,
    add_run_step,
    create_v1,
    migrate_v1_to_v2,
    statements,
)
from ..sessions import LEASES_SCHEMA
from ..sleep import SLEEP_PG, add_sleep

Step = Callable[[sqlite3.Connection], None]
"""A migration on SQLite: a plain function of the connection, run inside
the migration's transaction."""


@dataclass(frozen=True)
class Migration:
    """One step of the schema: ``step`` on SQLite, the ``postgres`` script on
    PostgreSQL ("": nothing to do there)."""

    version: int
    name: str
    step: Step
    postgres: str = ""


def nothing(conn: sqlite3.Connection) -> None:
    """A migration with nothing to do on SQLite."""


def add_lease_tables(conn: sqlite3.Connection) -> None:
    """Migration 15: the tables of several hubs' leases (migration 13 on
    PostgreSQL), so both databases have one schema and take every statement
    of the store (``sessions/leases.py``). One file has one hub: they stay empty.
    Idempotent on its own."""
    for statement in statements(LEASES_SCHEMA):
        conn.execute(statement)


def add_run_settings_and_feed(conn: sqlite3.Connection) -> None:
    """Migration 17: a deployment's pause and its ``max_concurrent_runs``
    (``schema.add_run_settings``), and its feed triggers, which show a pause
    (``feed.add_deployment_feed``). Idempotent on its own."""
    add_run_settings(conn)
    add_deployment_feed(conn)


# PostgreSQL begins at schema 12: its migration 1 is the whole schema 12, and
# 2-12 are in it (schema/postgres.py). Later migrations give both.
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
    Migration(15, "0015_lease_tables", add_lease_tables),
    Migration(16, "0016_failure_policies", add_failure_policies, postgres=FAILURE_POLICIES_PG),
    Migration(
        17,
        "0017_run_settings",
        add_run_settings_and_feed,
        postgres=RUN_SETTINGS_PG + DEPLOYMENT_FEED_PG,
    ),
    Migration(18, "0018_timers", add_timers, postgres=TIMERS_PG),
    Migration(19, "0019_schedules", add_schedules, postgres=SCHEDULES_PG),
    Migration(20, "0020_mail", add_mail, postgres=MAIL_PG),
    Migration(21, "0021_sleep", add_sleep, postgres=SLEEP_PG),
)
LATEST = MIGRATIONS[-1].version


def current_version(conn: sqlite3.Connection) -> int:
    """The applied version: 0 for a database without ``schema_version``."""
    if (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        is None
    ):
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def _newer(version: int) -> MigrationError:
    return MigrationError(
        f"database schema version {version} is newer than this release ({LATEST})"
    )


def _apply(conn: sqlite3.Connection, migration: Migration) -> bool:
    """Inside the migration's transaction: ``migration`` and its version bump,
    unless the version, read again under the write lock, says it is done."""
    version = current_version(conn)
    if version > LATEST:
        raise _newer(version)
    if version >= migration.version:
        return False
    migration.step(conn)
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (migration.version,))
    return True


OnStep = Callable[[int, int, str], object]
"""``on_step(done, total, name)``: migration ``name`` was committed, the
``done``-th of ``total`` pending ones."""


async def apply_migrations(db: Database, on_step: OnStep | None = None) -> list[str]:
    """Apply every pending migration on ``db``, each in its own ``BEGIN
    IMMEDIATE`` ... ``COMMIT`` with its version bump; return their names.
    Each one committed is told to ``on_step``."""
    start = await db.read(current_version)
    if start > LATEST:
        raise _newer(start)
    pending = [m for m in MIGRATIONS if m.version > start]
    applied: list[str] = []
    for migration in pending:
        # Heavy: a table rebuild of a large database takes long.
        if await db.transact(partial(_apply, migration=migration), heavy=True):
            applied.append(migration.name)
            if on_step is not None:
                on_step(len(applied), len(pending), migration.name)
    return applied


def migrations_after(version: int) -> list[str]:
    """The names of the migrations a database at ``version`` has yet to apply."""
    return [m.name for m in MIGRATIONS if m.version > version]
