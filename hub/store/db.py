"""The hub's store on SQLite: one writer connection, one reader connection.

Writes go through :meth:`SqliteStore.transact`: an ``anyio.Lock`` serialises them
inside this process and ``BEGIN IMMEDIATE`` takes SQLite's write lock up
front, so a transaction never fails half-way on lock upgrade and never
interleaves with another. The body of a transaction runs whole
(``runtime.transact``): on the event loop's thread when SQLite's lock is
free, else on the writer's thread; the lock is held for the time the
statements take, not for a round trip through the event loop per
statement. :meth:`SqliteStore.write` is the same transaction with the body on the
loop, one round trip a statement, for code that must await other things
inside it (tests that stage a crash's leftovers, say); the hub itself does
not use it. Reads use ``store.db``, a second connection: in
WAL mode it sees committed data only, so a read running while some task
holds a write transaction open never observes that transaction's rows. Reads go through
``fetch_one`` / ``fetch_all`` (``reads.py``): one call each, so no task's
read snapshot lingers on the shared reader for another task to read in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import TypeVar

import aiosqlite
import anyio

from runtime import (
    Body,
    TransactionFailed,
    configure_sqlite,
    connect_sqlite,
    release_free_pages,
    transact,
)

from .._errors import StoreUnavailable
from .base import Store
from .blob_io import BlobReader, SqliteBlobReader
from .migrations import OnStep, apply_migrations

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT = 5.0


async def _connect(path: Path, busy_timeout: float, *, reader: bool) -> aiosqlite.Connection:
    db = await connect_sqlite(path)
    try:
        db.row_factory = sqlite3.Row
        await db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if reader:
            await db.execute("PRAGMA query_only = ON")
        else:
            # Every write is answered outward (a receipt, an Ack): fsynced.
            await configure_sqlite(db)
    except BaseException:
        await db.close()
        raise
    return db


class SqliteStore(Store):
    """The hub database in a SQLite file. Use :meth:`open` (or ``open_store``)."""

    dialect = "sqlite"

    def __init__(self, path: Path, writer: aiosqlite.Connection, reader: aiosqlite.Connection):
        self.path = self._file = path
        self.db = reader
        self._reader = reader
        self._writer = writer
        self._lock = anyio.Lock()

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        on_migration: OnStep | None = None,
    ) -> SqliteStore:
        """Open (creating if needed) the database at ``path`` and migrate it
        (each migration applied told to ``on_migration``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = await _connect(path, busy_timeout, reader=False)
        try:
            # Table rebuilds in migrations need foreign keys off, and the
            # pragma is a no-op inside a transaction: set it around them.
            await writer.execute("PRAGMA foreign_keys = OFF")
            await apply_migrations(writer, on_migration)
            await writer.execute("PRAGMA foreign_keys = ON")
            reader = await _connect(path, busy_timeout, reader=True)
        except BaseException:
            await writer.close()
            raise
        return cls(path, writer, reader)

    def blob_reader(self) -> BlobReader:
        return SqliteBlobReader(self._file)

    async def release_free_pages(self, keep: int, *, slack: int = 0) -> int:
        """Give the file's free pages beyond ``keep`` bytes back once more than
        ``keep + slack`` are free (``runtime.release_free_pages``); the pages
        released. Between two write transactions."""
        async with self._lock:
            return await release_free_pages(self._writer, keep, slack=slack)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await self._reader.close()
                await self._writer.close()

    async def transact(self, body: Body[T], *, durable: bool = True, heavy: bool = False) -> T:
        """One write transaction, ``body`` run whole (``runtime.transact``,
        whose ``durable`` and ``heavy`` it passes on); its result.
        Failure to begin or to commit is :class:`StoreUnavailable`, so a
        caller never mistakes an uncommitted change for a committed one."""
        async with self._lock:
            try:
                return await transact(self._writer, body, durable=durable, heavy=heavy)
            except TransactionFailed as exc:
                raise StoreUnavailable(str(exc)) from exc

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction: ``BEGIN IMMEDIATE`` ... ``COMMIT``, its
        body on the loop (prefer :meth:`transact`).

        The body runs with the writer connection; any exception (including
        cancellation) rolls back. Failure to begin or to commit is raised as
        :class:`StoreUnavailable`, so a caller never mistakes an uncommitted
        change for a committed one.
        """
        async with self._lock:
            try:
                await self._writer.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"cannot begin a write transaction: {exc}") from exc
            try:
                yield self._writer
            except BaseException:
                await self._rollback()
                raise
            # Shielded: abandoning a COMMIT half-way would leave the writer
            # connection inside a transaction that the next write() would trip on.
            with anyio.CancelScope(shield=True):
                try:
                    await self._writer.execute("COMMIT")
                except sqlite3.Error as exc:
                    await self._rollback()
                    raise StoreUnavailable(f"commit failed: {exc}") from exc

    async def _rollback(self) -> None:
        with anyio.CancelScope(shield=True):
            # A failed ROLLBACK means SQLite already rolled the transaction back.
            if self._writer.in_transaction:
                with suppress(sqlite3.Error):
                    await self._writer.execute("ROLLBACK")
