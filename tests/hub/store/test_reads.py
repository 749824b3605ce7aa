"""Reads on the shared reader connection: one hop each, so a task reading
back what it just committed sees it, however many tasks read meanwhile."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hub.store import Store, fetch_all, fetch_one

pytestmark = pytest.mark.anyio

ROUNDS = 300
READERS = 4


async def _store_with_counter(tmp_path: Path) -> Store:
    store = await Store.open(tmp_path / "hub.db")
    async with store.write() as db:
        await db.execute("CREATE TABLE counter (n INTEGER NOT NULL)")
        await db.execute("INSERT INTO counter (n) VALUES (0), (0)")
    return store


async def test_a_statement_left_open_on_the_reader_hides_later_commits(tmp_path: Path) -> None:
    """Why reads are one hop: a SELECT executed and not yet exhausted holds a
    read transaction, and every other statement on the connection runs in it.
    (``in_transaction`` stays False all along: it only sees explicit BEGINs.)"""
    async with await _store_with_counter(tmp_path) as store:
        async with store.db.execute("SELECT n FROM counter") as held:
            async with store.write() as db:
                await db.execute("UPDATE counter SET n = 1")
            stale = await fetch_all(store.db, "SELECT n FROM counter")
            assert [row["n"] for row in stale] == [0, 0]
            assert not store.db.in_transaction
            await held.fetchall()
        fresh = await fetch_all(store.db, "SELECT n FROM counter")
        assert [row["n"] for row in fresh] == [1, 1]


async def test_rows_keep_the_stores_row_factory(tmp_path: Path) -> None:
    async with await _store_with_counter(tmp_path) as store:
        row = await fetch_one(store.db, "SELECT n, n + 1 AS m FROM counter")
        assert row is not None
        assert (row["n"], row["m"], row[1]) == (0, 1, 1)
        assert await fetch_one(store.db, "SELECT n FROM counter WHERE n = ?", (7,)) is None
        named = await fetch_all(store.db, "SELECT n FROM counter WHERE n = :n", {"n": 0})
        assert len(named) == 2


async def test_a_read_back_sees_its_own_commit_while_others_read(tmp_path: Path) -> None:
    """Readers keep the reader connection busy while one task commits and
    reads back, ``ROUNDS`` times: a reader's statement left open between two
    hops would hand the read-back its older snapshot."""
    seen: list[tuple[int, int]] = []  # (committed, read back)
    async with await _store_with_counter(tmp_path) as store:

        async def read_forever() -> None:
            while True:
                await fetch_all(store.db, "SELECT n FROM counter")
                await fetch_one(store.db, "SELECT MAX(n) FROM counter")

        async with anyio.create_task_group() as tg:
            for _ in range(READERS):
                tg.start_soon(read_forever)
            for n in range(1, ROUNDS + 1):
                async with store.write() as db:
                    await db.execute("UPDATE counter SET n = ?", (n,))
                row = await fetch_one(store.db, "SELECT MIN(n) FROM counter")
                assert row is not None
                seen.append((n, row[0]))
            tg.cancel_scope.cancel()
    assert len(seen) == ROUNDS
    assert [(n, read) for n, read in seen if read != n] == []
