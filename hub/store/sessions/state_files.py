"""A state dir's databases read as they are on disk, by commands that run
without a hub: ``mailrun nats-config`` (the NATS users of the live
deployments and active producers) and ``mailrun migrate`` (schema versions,
and whether a sidecar's inbox is in release 1's format).

Nothing here opens a store (which would migrate the database): a SQLite
file is opened read-only (:func:`read_state_file`), a PostgreSQL database read
on a connection of the caller's. A sidecar's inbox is SQLite only; its
statements have a PostgreSQL text all the same (the catalog's), as every
statement declared here is checked on both databases.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from ..sql import SqliteTx, Tx, sql

if TYPE_CHECKING:
    import asyncpg

T = TypeVar("T")


class NatsUser(NamedTuple):
    """A deployment's or a producer's id and its NATS user (None: from
    before NATS identities)."""

    id: str
    nats_user: str | None


class InboxFormat(NamedTuple):
    """What tells a sidecar inbox's format: its tables, the columns of its
    ``inbox`` table, its schema version (None: no ``schema_version`` table)."""

    tables: frozenset[str]
    inbox_columns: frozenset[str]
    version: int | None


_VERSION = sql("SELECT MAX(version) FROM schema_version")
_HAS_VERSION = sql(
    "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version')",
    postgres="SELECT to_regclass('schema_version') IS NOT NULL",
)
_DEPLOYMENT_USERS = sql("SELECT id, nats_user FROM deployment WHERE deleted_at IS NULL ORDER BY id")
_PRODUCER_USERS = sql("SELECT id, nats_user FROM producer WHERE removed_at IS NULL ORDER BY id")
_TABLES = sql(
    "SELECT name FROM sqlite_master WHERE type = 'table'",
    postgres="SELECT table_name AS name FROM information_schema.tables"
    " WHERE table_schema = current_schema()",
)
_INBOX_COLUMNS = sql(
    "SELECT name FROM pragma_table_info('inbox')",
    postgres="SELECT column_name AS name FROM information_schema.columns"
    " WHERE table_schema = current_schema() AND table_name = 'inbox'",
)


def read_state_file(path: Path, body: Callable[[Tx], T]) -> T:
    """``body`` on the SQLite file at ``path``, opened read-only; its result.
    Failures are ``sqlite3``'s or the store's (``StoreUnavailable``)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return body(SqliteTx(conn))
    finally:
        conn.close()


def schema_version(tx: Tx) -> int | None:
    """The schema version recorded (None: none); the table must exist."""
    row = tx.fetch_one(_VERSION)
    return None if row is None or row[0] is None else int(row[0])


def live_deployment_users(tx: Tx) -> list[NatsUser]:
    """Every live deployment's NATS user, by id."""
    return [NatsUser(str(row[0]), row[1]) for row in tx.fetch_all(_DEPLOYMENT_USERS)]


def active_producer_users(tx: Tx) -> list[NatsUser]:
    """Every producer not removed, with its NATS user, by id (schema 10 on)."""
    return [NatsUser(str(row[0]), row[1]) for row in tx.fetch_all(_PRODUCER_USERS)]


def inbox_format(tx: Tx) -> InboxFormat:
    """A sidecar inbox's tables, ``inbox`` columns and schema version."""
    tables = frozenset(str(row[0]) for row in tx.fetch_all(_TABLES))
    columns = frozenset(str(row[0]) for row in tx.fetch_all(_INBOX_COLUMNS))
    version = schema_version(tx) if "schema_version" in tables else None
    return InboxFormat(tables, columns, version)


async def postgres_schema_version(conn: asyncpg.Connection) -> int:
    """A PostgreSQL hub database's schema version, on ``conn`` (0: none yet)."""
    if not await conn.fetchval(_HAS_VERSION.postgres):
        return 0
    return int(await conn.fetchval(_VERSION.postgres) or 0)
