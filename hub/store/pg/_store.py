"""The hub's store on PostgreSQL: the same interface as the SQLite ``Store``.

One writer connection, on a thread of its own: :meth:`PgStore.transact`
runs a body whole there (``BEGIN`` ... ``COMMIT``), one hand-off per
transaction as on SQLite, and an ``anyio.Lock`` keeps this process's
writes one at a time. One reader connection in autocommit mode
(``store.db``): each read sees what was committed when it ran. A
connection that broke (PostgreSQL restarted, the network went) is opened
again at its next use; the call that found it broken fails as the store
being unavailable, as SQLite's "database is locked" does.

``durable=False`` is ``SET LOCAL synchronous_commit = off``: the commit
returns before the WAL is flushed, and a crash of the server (not of the
hub) may lose it, never half of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import psycopg

from runtime import Body, TransactionFailed, drive

from ..._errors import MigrationError, StoreUnavailable
from ..base import Store
from ..blob_io import BlobReader
from ..migrations import LATEST, MIGRATIONS, OnStep
from ._conn import PgAsync, PgDirect

T = TypeVar("T")

_MIGRATION_LOCK = 0x6D61696C72756E  # "mailrun": pg_advisory_xact_lock's key for migrations


def connect(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection (transactions are explicit) with client-side binding."""
    try:
        return psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor)
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot connect to {redact(url)}: {exc}") from exc


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"


class _Link:
    """One psycopg connection, reopened when it broke."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg.Connection[Any] | None = None

    def get(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.broken or self._conn.closed:
            if self._conn is not None:
                with suppress(psycopg.Error):
                    self._conn.close()
            self._conn = connect(self._url)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


class _Reader(PgDirect):
    """A ``PgDirect`` over a link that reopens: for ``store.db``."""

    def __init__(self, link: _Link) -> None:
        self._link = link

    def connection(self) -> psycopg.Connection[Any]:
        return self._link.get()


class PgStore(Store):
    """The hub database on PostgreSQL. Use :meth:`open` (or ``open_store``)."""

    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = None
        self._pg_writer = _Link(url)
        self._pg_reader = _Link(url)
        self._lock = anyio.Lock()
        self.db = PgAsync(_Reader(self._pg_reader))

    @classmethod
    async def open(cls, url: str, *, on_migration: OnStep | None = None) -> PgStore:
        """Connect to the database at ``url`` and migrate it (each migration
        applied told to ``on_migration``)."""
        store = cls(url)
        try:
            await anyio.to_thread.run_sync(store._migrate, on_migration)
        except BaseException:
            await store.aclose()
            raise
        return store

    def _migrate(self, on_step: OnStep | None) -> None:
        conn = self._pg_writer.get()
        with conn.transaction():
            conn.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
            exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
            version = 0
            if exists and exists[0]:
                row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
                version = int(row[0]) if row and row[0] is not None else 0
            if version > LATEST:
                raise MigrationError(
                    f"database schema version {version} is newer than this release ({LATEST})"
                )
            pending = [m for m in MIGRATIONS if m.version > version]
            for done, migration in enumerate(pending, 1):
                if migration.postgres:
                    conn.execute(migration.postgres)
                if on_step is not None:
                    on_step(done, len(pending), migration.name)
            if pending:
                conn.execute("DELETE FROM schema_version")
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", [LATEST])

    def blob_reader(self) -> BlobReader:
        return PgBlobReader(self.url)

    async def release_free_pages(self, keep: int, *, slack: int = 0) -> int:
        """Nothing to do: PostgreSQL's autovacuum reuses what was freed."""
        return 0

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        self._pg_reader.close()
        self._pg_writer.close()

    async def transact(self, body: Body[T], *, durable: bool = True) -> T:
        """One write transaction, ``body`` run whole on the writer's thread;
        its result. Failure to begin or to commit is :class:`StoreUnavailable`."""
        async with self._lock:
            try:
                # Shielded: once handed over, the transaction runs to its end,
                # so no caller is cancelled while its change may have committed.
                with anyio.CancelScope(shield=True):
                    result = await anyio.to_thread.run_sync(self._run, body, durable)
            except TransactionFailed as exc:
                raise StoreUnavailable(str(exc)) from exc
        return result

    def _run(self, body: Body[T], durable: bool) -> T:
        try:
            conn = self._pg_writer.get()
            conn.execute("BEGIN")
            if not durable:
                conn.execute("SET LOCAL synchronous_commit = off")
        except (psycopg.Error, StoreUnavailable) as exc:
            raise TransactionFailed(f"cannot begin a write transaction: {exc}") from exc
        try:
            result = drive(body(PgDirect(conn)))
        except BaseException:
            _rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            _rollback(conn)
            raise TransactionFailed(f"commit failed: {exc}") from exc
        return result

    @asynccontextmanager
    async def write(self) -> AsyncIterator[PgAsync]:
        """One write transaction with its body on the loop (prefer :meth:`transact`)."""
        async with self._lock:
            try:
                conn = await anyio.to_thread.run_sync(self._begin)
            except (psycopg.Error, StoreUnavailable) as exc:
                raise StoreUnavailable(f"cannot begin a write transaction: {exc}") from exc
            try:
                yield PgAsync(PgDirect(conn), _NoLock())
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(_rollback, conn)
                raise
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(conn.execute, "COMMIT")
                except psycopg.Error as exc:
                    await anyio.to_thread.run_sync(_rollback, conn)
                    raise StoreUnavailable(f"commit failed: {exc}") from exc

    def _begin(self) -> psycopg.Connection[Any]:
        conn = self._pg_writer.get()
        conn.execute("BEGIN")
        return conn


class _NoLock:
    """The write transaction's lock is already held: calls go straight on."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def _rollback(conn: psycopg.Connection[Any]) -> None:
    if not conn.closed:
        with suppress(psycopg.Error):
            conn.execute("ROLLBACK")


class PgBlobReader:
    """Chunks of a blob by ``substring``, on a connection of its own."""

    def __init__(self, url: str) -> None:
        self._link = _Link(url)
        self._lock = anyio.Lock()

    async def read(self, digest: str, offset: int, length: int) -> tuple[int, bytes] | None:
        async with self._lock:
            return await anyio.to_thread.run_sync(self._read, digest, offset, length)

    def _read(self, digest: str, offset: int, length: int) -> tuple[int, bytes] | None:
        row = (
            self._link.get()
            .execute(
                "SELECT size, substring(data FROM %s FOR %s) FROM blob WHERE digest = %s",
                [offset + 1, length, digest],
            )
            .fetchone()
        )
        if row is None:
            return None
        return int(row[0]), bytes(row[1] or b"")

    def close(self) -> None:
        self._link.close()
