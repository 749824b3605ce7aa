"""The hub's store on PostgreSQL: the same interface as the SQLite store.

One writer connection: :meth:`PgStore.transact` runs a body inside one
transaction on it, one body at a time in this process (an ``anyio.Lock``):
the body, a plain function, on a worker thread, each of its statements run
on the event loop by asyncpg (``_tx.py``), in the PostgreSQL text its
declaration gave (``hub.store.sql``). Reads (:meth:`PgStore.read`) go to a
small pool: each read sees what was committed when it ran. A writer
connection that broke (PostgreSQL restarted, the network went) is opened
again at its next use; the transaction that found it broken fails as the
store being unavailable, as SQLite's "database is locked" does. Every
statement has a deadline (``COMMAND_TIMEOUT``), so a wedged server fails a
transaction instead of holding the writer for ever.

``durable=False`` is ``SET LOCAL synchronous_commit = off``: the commit
returns before the WAL is flushed, and a crash of the server (not of the
hub) may lose it, never half of it.

Migrations stay scripts of DDL (``Migration.postgres``), run at open under
an advisory lock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

import anyio
import asyncpg

from runtime.config import redact_url

from ..._errors import MigrationError, StoreUnavailable
from ..base import Store
from ..blob_io import BlobReader
from ..migrations import LATEST, MIGRATIONS, OnStep
from ..sql import TxBody
from ._tx import CONNECTION_ERRORS, PgTx

T = TypeVar("T")

COMMAND_TIMEOUT = 30.0
READERS = 4
_MIGRATION_LOCK = 0x6D61696C72756E  # "mailrun": pg_advisory_xact_lock's key for migrations


async def connect(url: str) -> asyncpg.Connection:
    """One connection to ``url``; ``StoreUnavailable`` when there is none to be had."""
    try:
        return await asyncpg.connect(url, command_timeout=COMMAND_TIMEOUT)
    except (asyncpg.PostgresError, *CONNECTION_ERRORS) as exc:
        raise StoreUnavailable(f"cannot connect to {redact_url(url)}: {exc}") from exc


class PgStore(Store):
    """The hub database on PostgreSQL. Use :meth:`open` (or ``open_store``)."""

    dialect = "postgresql"
    shared = True

    def __init__(self, url: str, pool: asyncpg.Pool) -> None:
        self.url = url
        self.path = None
        self._pool = pool
        self._writer: asyncpg.Connection | None = None
        self._lock = anyio.Lock()

    @classmethod
    async def open(cls, url: str, *, on_migration: OnStep | None = None) -> PgStore:
        """Connect to the database at ``url`` and migrate it (each migration
        applied told to ``on_migration``)."""
        conn = await connect(url)
        try:
            await _migrate(conn, on_migration)
        finally:
            await conn.close()
        try:
            pool = await asyncpg.create_pool(
                url, min_size=1, max_size=READERS, command_timeout=COMMAND_TIMEOUT
            )
        except (asyncpg.PostgresError, *CONNECTION_ERRORS) as exc:
            raise StoreUnavailable(f"cannot connect to {redact_url(url)}: {exc}") from exc
        return cls(url, pool)

    def blob_reader(self) -> BlobReader:
        return PgBlobReader(self._pool)

    async def release_free_pages(self, keep: int, *, slack: int = 0) -> int:
        """Nothing to do: PostgreSQL's autovacuum reuses what was freed."""
        return 0

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._writer is not None:
                    with suppress(Exception):
                        await self._writer.close(timeout=2)
                    self._writer = None
                with anyio.move_on_after(5):
                    await self._pool.close()

    async def _connection(self) -> asyncpg.Connection:
        if self._writer is None or self._writer.is_closed():
            self._writer = await connect(self.url)
        return self._writer

    async def transact(self, body: TxBody[T], *, durable: bool = True, heavy: bool = False) -> T:
        # The body on a worker thread, its statements on the loop (PgTx);
        # ``heavy`` changes nothing here: the server does the work. Shielded:
        # no caller is cancelled while its change may have committed.
        async with self._lock:
            with anyio.CancelScope(shield=True):
                async with self._transaction(durable) as conn:
                    result = await anyio.to_thread.run_sync(body, PgTx(conn))
        return result

    async def read(self, body: TxBody[T], *, heavy: bool = False) -> T:
        """``body`` on a connection of the pool, on a worker thread."""
        try:
            async with self._pool.acquire() as conn:
                return await anyio.to_thread.run_sync(body, PgTx(conn))
        except CONNECTION_ERRORS as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    @asynccontextmanager
    async def _transaction(self, durable: bool) -> AsyncIterator[asyncpg.Connection]:
        try:
            conn = await self._connection()
            transaction = conn.transaction()
            await transaction.start()
            if not durable:
                await conn.execute("SET LOCAL synchronous_commit = off")
        except (asyncpg.PostgresError, *CONNECTION_ERRORS) as exc:
            self._drop_broken()
            raise StoreUnavailable(f"cannot begin a write transaction: {exc}") from exc
        try:
            yield conn
        except BaseException:
            with anyio.CancelScope(shield=True), suppress(Exception):
                await transaction.rollback()
            self._drop_broken()
            raise
        try:
            await transaction.commit()
        except (asyncpg.PostgresError, *CONNECTION_ERRORS) as exc:
            with suppress(Exception):
                await transaction.rollback()
            self._drop_broken()
            raise StoreUnavailable(f"commit failed: {exc}") from exc

    def _drop_broken(self) -> None:
        if self._writer is not None and self._writer.is_closed():
            self._writer = None


async def _migrate(conn: asyncpg.Connection, on_step: OnStep | None) -> None:
    async with conn.transaction():
        await conn.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        exists = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
        version = 0
        if exists:
            version = int(
                await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            )
        if version > LATEST:
            raise MigrationError(
                f"database schema version {version} is newer than this release ({LATEST})"
            )
        pending = [m for m in MIGRATIONS if m.version > version]
        for done, migration in enumerate(pending, 1):
            if migration.postgres:
                await conn.execute(migration.postgres)
            if on_step is not None:
                on_step(done, len(pending), migration.name)
        if pending:
            await conn.execute("DELETE FROM schema_version")
            await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", LATEST)


class PgBlobReader:
    """Chunks of a blob by ``substring``, on the store's pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def read(self, digest: str, offset: int, length: int) -> tuple[int, bytes] | None:
        row: Any = await self._pool.fetchrow(
            "SELECT size, substring(data FROM $1 FOR $2) FROM blob WHERE digest = $3",
            offset + 1,
            length,
            digest,
        )
        if row is None:
            return None
        return int(row[0]), bytes(row[1] or b"")

    def close(self) -> None:
        return None
