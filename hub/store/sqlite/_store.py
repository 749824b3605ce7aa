"""The hub's store on SQLite: one writer connection, one reader connection.

Writes go through :meth:`SqliteStore.transact`: the writer's lock
serialises them inside this process and ``BEGIN IMMEDIATE`` takes SQLite's
write lock up front, so a transaction never fails half-way on lock upgrade
and never interleaves with another. The body of a transaction runs whole
(``runtime.sqlite``'s ``Database``): on the event loop's thread when
SQLite's lock is free, else on a worker thread; the lock is held for the
time the statements take, not for a round trip through the event loop per
statement.

Reads use a second connection, in WAL mode seeing committed data only, so
a read running while some task holds a write transaction open never
observes that transaction's rows: :meth:`SqliteStore.read` runs a read's
body on it, on the loop's thread (a ``heavy`` one on a worker thread), each
statement run to its end, so no read snapshot lingers for another task to
read in.

Opening the store migrates the file on the writer, each migration a plain
function run in its own transaction (``hub.store.migrations``), before the
reader opens; reading a file's version without opening it is
:func:`read_version`.
"""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path
from typing import TypeVar

import anyio

from runtime.errors import TransactionFailed
from runtime.sqlite import Database, Synchronous, release_free_pages

from ..._errors import MigrationError, StoreUnavailable
from ..base import Store
from ..blob_io import BlobReader, SqliteBlobReader
from ..migrations import LATEST, OnStep, apply_migrations, current_version, migrations_after
from ..sql import SqliteTx, TxBody

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT = 5.0


class SqliteStore(Store):
    """The hub database in a SQLite file. Use :meth:`open` (or ``open_store``)."""

    dialect = "sqlite"
    shared = False

    def __init__(self, path: Path, writer: Database, reader: Database) -> None:
        self.path = self._file = path
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = Synchronous.FULL,
        on_migration: OnStep | None = None,
    ) -> SqliteStore:
        """Open (creating if needed) the database at ``path`` and migrate it
        (each migration applied told to ``on_migration``). Every write is
        answered outward (a receipt, an Ack): ``FULL`` unless a benchmark
        says otherwise (``MAILRUN_SQLITE_SYNCHRONOUS``, read where the
        process starts)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = await Database.open(path, busy_timeout=busy_timeout, synchronous=synchronous)
        try:
            await _migrate(writer, path, on_migration)
            await writer.read(lambda conn: conn.execute("PRAGMA foreign_keys = ON"))
            reader = await Database.open(
                path, busy_timeout=busy_timeout, synchronous=None, query_only=True
            )
        except BaseException:
            await writer.aclose()
            raise
        return cls(path, writer, reader)

    def blob_reader(self) -> BlobReader:
        return SqliteBlobReader(self._file)

    async def release_free_pages(self, keep: int, *, slack: int = 0) -> int:
        """Give the file's free pages beyond ``keep`` bytes back once more than
        ``keep + slack`` are free (``runtime.sqlite.release_free_pages``); the
        pages released. Between two write transactions."""
        return await self._writer.read(
            partial(release_free_pages, keep=keep, slack=slack), heavy=True
        )

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._reader.aclose()
            await self._writer.aclose()

    async def transact(self, body: TxBody[T], *, durable: bool = True, heavy: bool = False) -> T:
        # runtime.sqlite's Database.transact, which says where it runs.
        try:
            return await self._writer.transact(partial(_body, body), durable=durable, heavy=heavy)
        except TransactionFailed as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def read(self, body: TxBody[T], *, heavy: bool = False) -> T:
        return await self._reader.read(partial(_body, body), heavy=heavy)


async def _migrate(writer: Database, path: Path, on_step: OnStep | None) -> None:
    # Table rebuilds in migrations need foreign keys off, and the pragma is
    # a no-op inside a transaction: set it around them.
    await writer.read(lambda conn: conn.execute("PRAGMA foreign_keys = OFF"))
    try:
        await apply_migrations(writer, on_step)
    except TransactionFailed as exc:
        raise StoreUnavailable(f"cannot migrate {path}: {exc}") from exc
    except sqlite3.Error as exc:
        raise MigrationError(f"cannot migrate {path}: {exc}") from exc


async def read_version(path: Path) -> int:
    """The schema version of the SQLite database at ``path``, read-only (0: none yet)."""
    path = Path(path)
    if not path.exists():
        return 0

    def read() -> int:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return current_version(conn)
        finally:
            conn.close()

    try:
        return await anyio.to_thread.run_sync(read)
    except sqlite3.Error as exc:
        raise MigrationError(f"cannot read {path}: {exc}") from exc


async def pending_migrations(path: Path) -> list[str]:
    """Names of the migrations that opening ``path`` would apply (read-only)."""
    version = await read_version(path)
    if version > LATEST:
        raise MigrationError(f"database schema version {version} is newer than {LATEST}")
    return migrations_after(version)


def _body(body: TxBody[T], conn: sqlite3.Connection) -> T:
    return body(SqliteTx(conn))
