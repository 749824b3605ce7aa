"""Both durable stores: commits fsynced (synchronous=FULL), files that give
freed pages back, a WAL cut back to its limit."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import aiosqlite
import pytest

from hub.store import open_store
from runtime import (
    JOURNAL_SIZE_LIMIT,
    SQLITE_SYNCHRONOUS_ENV,
    configure_sqlite,
    release_free_pages,
    sqlite_synchronous,
)
from runtime.sqlite import Database
from sidecar import Inbox

pytestmark = pytest.mark.anyio

FULL, INCREMENTAL, MEMORY = 2, 2, 2


async def pragma(db: aiosqlite.Connection | Database, name: str) -> object:
    if isinstance(db, Database):
        return await db.read(lambda conn: conn.execute(f"PRAGMA {name}").fetchone()[0])
    async with db.execute(f"PRAGMA {name}") as cur:
        row = await cur.fetchone()
    assert row is not None
    return row[0]


async def test_the_hub_writer_and_the_inbox_fsync_every_commit(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        writer = store._writer
        assert await pragma(writer, "synchronous") == FULL
        assert await pragma(writer, "journal_mode") == "wal"
        assert await pragma(writer, "auto_vacuum") == INCREMENTAL
        assert await pragma(writer, "journal_size_limit") == JOURNAL_SIZE_LIMIT
        # Statement journals (an accept's savepoint) in memory, not a temp file.
        assert await pragma(writer, "temp_store") == MEMORY
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        for name, value in [
            ("synchronous", FULL),
            ("journal_mode", "wal"),
            ("auto_vacuum", INCREMENTAL),
            ("temp_store", MEMORY),
        ]:
            assert (
                await inbox.db.read(lambda c, n=name: c.execute(f"PRAGMA {n}").fetchone()[0])
                == value
            )
    finally:
        await inbox.aclose()


async def fill_and_empty(db: aiosqlite.Connection, rows: int) -> None:
    await db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data BLOB)")
    await db.executemany("INSERT INTO t (data) VALUES (?)", [(os.urandom(100_000),)] * rows)
    await db.execute("UPDATE t SET data = x''")


async def test_freed_pages_go_back_to_the_file_system_beyond_what_is_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    async with aiosqlite.connect(path, isolation_level=None) as db:
        await configure_sqlite(db)
        await fill_and_empty(db, 100)  # about 10 MB freed
        assert await release_free_pages(db, keep=1_000_000, slack=10_000_000) == 0  # busy
        released = await release_free_pages(db, keep=1_000_000)
        assert released > 2000
        async with db.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cur:
            await cur.fetchone()
        free = int(str(await pragma(db, "freelist_count"))) * 4096
        assert 900_000 <= free <= 1_100_000
    assert path.stat().st_size < 2_000_000


async def test_a_database_without_incremental_vacuum_keeps_its_free_pages(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).execute("CREATE TABLE made_before (x)").connection.close()
    async with aiosqlite.connect(path, isolation_level=None) as db:
        await configure_sqlite(db)
        assert await pragma(db, "auto_vacuum") == 0  # a table existed: no change
        await fill_and_empty(db, 30)
        assert await release_free_pages(db, keep=0) == 0


async def test_normal_sync_is_a_benchmark_setting_said_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert sqlite_synchronous({}, warn=True) == "FULL"
    assert not caplog.records
    assert sqlite_synchronous({SQLITE_SYNCHRONOUS_ENV: "normal"}, warn=True) == "NORMAL"
    [warning] = caplog.records
    assert "acknowledgements are not durable" in warning.getMessage()
    for bad in ("OFF", "fast", "0"):
        with pytest.raises(ValueError, match=f"{SQLITE_SYNCHRONOUS_ENV} must be FULL or NORMAL"):
            sqlite_synchronous({SQLITE_SYNCHRONOUS_ENV: bad})
    monkeypatch.setenv(SQLITE_SYNCHRONOUS_ENV, "NORMAL")
    async with aiosqlite.connect(tmp_path / "x.db", isolation_level=None) as db:
        await configure_sqlite(db)
        assert await pragma(db, "synchronous") == 1  # NORMAL
