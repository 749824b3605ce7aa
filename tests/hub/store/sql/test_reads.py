"""Reads on the shared reader connection: each statement run to its end in
one call, so a task reading back what it just committed sees it, however
many tasks read meanwhile (``store.read``: a body's statements on the
reader)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from hub.store import Store, Tx, open_store
from hub.store.sql import Row, sql
from tests.support.store import execute

pytestmark = pytest.mark.anyio

ROUNDS = 300
READERS = 4


async def _store_with_counter(tmp_path: Path) -> Store:
    store = await open_store(tmp_path / "hub.db")
    await execute(store, "CREATE TABLE counter (n INTEGER NOT NULL)")
    await execute(store, "INSERT INTO counter (n) VALUES (0), (0)")
    return store


_SET = sql("UPDATE counter SET n = ?")
_ALL = sql("SELECT n FROM counter")
_MAX = sql("SELECT MAX(n) FROM counter")
_MIN = sql("SELECT MIN(n) FROM counter")
_BOTH = sql("SELECT n, n + 1 AS m FROM counter")
_BY_VALUE = sql("SELECT n FROM counter WHERE n = ?")
_BY_NAME = sql("SELECT n FROM counter WHERE n = :n")


def _commit_elsewhere(path: Path, n: int) -> None:
    """A commit on a connection of its own, as another writer's would be."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("UPDATE counter SET n = ?", (n,))
    finally:
        other.close()


async def test_a_statement_left_open_hides_later_commits_and_the_reader_never_leaves_one(
    tmp_path: Path,
) -> None:
    """Why every read runs its statement to its end: a SELECT stepped and not
    yet exhausted holds a read transaction, and every other statement on the
    connection runs in it. (``in_transaction`` stays False all along: it only
    sees explicit BEGINs.) The reader's ``fetch_one`` reads one row of many
    and closes its statement, so the body's next statement sees a commit
    made in between."""
    path = tmp_path / "hub.db"
    async with await _store_with_counter(tmp_path) as store:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            held = conn.execute("SELECT n FROM counter")
            held.fetchone()
            _commit_elsewhere(path, 1)
            assert conn.execute("SELECT n FROM counter").fetchall() == [(0,), (0,)]
            assert not conn.in_transaction
            held.fetchall()
            assert conn.execute("SELECT n FROM counter").fetchall() == [(1,), (1,)]
        finally:
            conn.close()

        def read_across_a_commit(tx: Tx) -> tuple[Row | None, list[Row]]:
            first = tx.fetch_one(_ALL)  # one row of two
            _commit_elsewhere(path, 2)
            return first, tx.fetch_all(_ALL)

        first, after = await store.read(read_across_a_commit)
        assert first is not None and first["n"] == 1
        assert [row["n"] for row in after] == [2, 2]


async def test_rows_keep_the_stores_row_factory(tmp_path: Path) -> None:
    async with await _store_with_counter(tmp_path) as store:
        row = await store.read(lambda tx: tx.fetch_one(_BOTH))
        assert row is not None
        assert (row["n"], row["m"], row[1], list(row.keys())) == (0, 1, 1, ["n", "m"])
        assert await store.read(lambda tx: tx.fetch_one(_BY_VALUE, (7,))) is None
        named = await store.read(lambda tx: tx.fetch_all(_BY_NAME, {"n": 0}))
        assert len(named) == 2


@pytest.mark.slow  # a stress: many commits under concurrent readers
async def test_a_read_back_sees_its_own_commit_while_others_read(tmp_path: Path) -> None:
    """Readers keep the reader connection busy while one task commits and
    reads back, ``ROUNDS`` times: a reader's statement left open between two
    hops would hand the read-back its older snapshot."""
    seen: list[tuple[int, int]] = []  # (committed, read back)
    async with await _store_with_counter(tmp_path) as store:

        async def read_forever() -> None:
            while True:
                await store.read(lambda tx: tx.fetch_all(_ALL))
                await store.read(lambda tx: tx.fetch_one(_MAX))

        async with anyio.create_task_group() as tg:
            for _ in range(READERS):
                tg.start_soon(read_forever)
            for n in range(1, ROUNDS + 1):
                await store.transact(lambda tx, n=n: tx.execute(_SET, (n,)))
                row = await store.read(lambda tx: tx.fetch_one(_MIN))
                assert row is not None
                seen.append((n, row[0]))
            tg.cancel_scope.cancel()
    assert len(seen) == ROUNDS
    assert [(n, read) for n, read in seen if read != n] == []
