"""Both durable stores: commits fsynced (synchronous=FULL), files that give
freed pages back, a WAL cut back to its limit."""

from __future__ import annotations

import os
import sqlite3
from functools import partial
from pathlib import Path

import pytest

from hub.store import open_store
from runtime.config import SQLITE_SYNCHRONOUS_ENV
from runtime.sqlite import (
    JOURNAL_SIZE_LIMIT,
    Database,
    Synchronous,
    free_pages_over,
    release_free_pages,
    sqlite_synchronous,
)
from sidecar import Inbox

pytestmark = pytest.mark.anyio

FULL, INCREMENTAL, MEMORY = 2, 2, 2


async def pragma(db: Database, name: str) -> object:
    return await db.read(lambda conn: conn.execute(f"PRAGMA {name}").fetchone()[0])


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


def fill_and_empty(conn: sqlite3.Connection, rows: int) -> None:
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data BLOB)")
    conn.executemany("INSERT INTO t (data) VALUES (?)", [(os.urandom(100_000),)] * rows)
    conn.execute("UPDATE t SET data = x''")


async def test_freed_pages_go_back_to_the_file_system_beyond_what_is_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    async with await Database.open(path) as db:
        await db.read(partial(fill_and_empty, rows=100))  # about 10 MB freed
        busy = partial(release_free_pages, keep=1_000_000, slack=10_000_000)
        assert not await db.read(partial(free_pages_over, limit=11_000_000))
        assert await db.read(busy) == 0
        assert await db.read(partial(free_pages_over, limit=1_000_000))
        released = await db.read(partial(release_free_pages, keep=1_000_000))
        assert released > 2000
        await db.read(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone())
        free = int(str(await pragma(db, "freelist_count"))) * 4096
        assert 900_000 <= free <= 1_100_000
    assert path.stat().st_size < 2_000_000


async def test_a_database_without_incremental_vacuum_keeps_its_free_pages(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).execute("CREATE TABLE made_before (x)").connection.close()
    async with await Database.open(path) as db:
        assert await pragma(db, "auto_vacuum") == 0  # a table existed: no change
        await db.read(partial(fill_and_empty, rows=30))
        assert not await db.read(partial(free_pages_over, limit=0))
        assert await db.read(partial(release_free_pages, keep=0)) == 0


async def test_normal_sync_is_a_benchmark_setting_said_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert sqlite_synchronous({}, warn=True) == Synchronous.FULL == "FULL"
    assert not caplog.records
    normal = sqlite_synchronous({SQLITE_SYNCHRONOUS_ENV: "normal"}, warn=True)
    assert normal == Synchronous.NORMAL == "NORMAL"
    [warning] = caplog.records
    assert "acknowledgements are not durable" in warning.getMessage()
    for bad in ("OFF", "fast", "0"):
        with pytest.raises(ValueError, match=f"{SQLITE_SYNCHRONOUS_ENV} must be FULL or NORMAL"):
            sqlite_synchronous({SQLITE_SYNCHRONOUS_ENV: bad})
    # The level read where a process starts is the one its writer runs at.
    async with await Database.open(tmp_path / "x.db", synchronous=normal) as db:
        assert await pragma(db, "synchronous") == 1  # NORMAL
