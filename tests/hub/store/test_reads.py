"""Reads on the shared reader connection: each statement run to its end in
one call, so a task reading back what it just committed sees it, however
many tasks read meanwhile. ``store.read`` (a body's statements on the
reader) and, while code still uses it, the older reader ``store.db`` with
``fetch_one`` / ``fetch_all`` (one hop each)."""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import pytest

from hub.store import Store, fetch_all, fetch_one, open_store
from hub.store.sql import sql
from tests.support import REPO
from tests.support.store import execute

pytestmark = pytest.mark.anyio

# Every aiosqlite read under hub/ is one hop, writer's or reader's: a rule
# with no exception for the reader to slip through.
TWO_HOPS_ALLOWED: set[str] = set()

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


async def test_a_statement_left_open_on_the_reader_hides_later_commits(tmp_path: Path) -> None:
    """Why reads are one hop: a SELECT executed and not yet exhausted holds a
    read transaction, and every other statement on the connection runs in it.
    (``in_transaction`` stays False all along: it only sees explicit BEGINs.)"""
    async with await _store_with_counter(tmp_path) as store:
        async with store.db.execute("SELECT n FROM counter") as held:
            await execute(store, "UPDATE counter SET n = 1")
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
        row = await store.read(lambda tx: tx.fetch_one(_BOTH))
        assert row is not None
        assert (row["n"], row["m"], row[1], list(row.keys())) == (0, 1, 1, ["n", "m"])


@pytest.mark.slow  # a stress: many commits under concurrent readers
async def test_a_read_back_sees_its_own_commit_while_others_read(tmp_path: Path) -> None:
    """Readers keep the reader connection busy while one task commits and
    reads back, ``ROUNDS`` times: a reader's statement left open between two
    hops would hand the read-back its older snapshot."""
    seen: list[tuple[int, int]] = []  # (committed, read back)
    async with await _store_with_counter(tmp_path) as store:

        async def read_forever() -> None:
            while True:
                # Both readers: the older one's hops, and the store's reads.
                await fetch_all(store.db, "SELECT n FROM counter")
                await store.read(lambda tx: tx.fetch_all(_ALL))
                await fetch_one(store.db, "SELECT MAX(n) FROM counter")
                await store.read(lambda tx: tx.fetch_one(_MAX))

        async with anyio.create_task_group() as tg:
            for _ in range(READERS):
                tg.start_soon(read_forever)
            for n in range(1, ROUNDS + 1):
                await store.transact(lambda tx, n=n: tx.execute(_SET, (n,)))
                row = await store.read(lambda tx: tx.fetch_one(_MIN))
                old = await fetch_one(store.db, "SELECT MIN(n) FROM counter")
                assert row is not None and old is not None
                seen.append((n, row[0]))
                seen.append((n, old[0]))
            tg.cancel_scope.cancel()
    assert len(seen) == 2 * ROUNDS
    assert [(n, read) for n, read in seen if read != n] == []


def _is_call_of(node: ast.AST, *names: str) -> bool:
    if isinstance(node, ast.Await):
        node = node.value
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
    )


def _two_hops(node: ast.AST) -> bool:
    if isinstance(node, ast.AsyncWith):
        return any(_is_call_of(item.context_expr, "execute") for item in node.items)
    if isinstance(node, ast.AsyncFor):
        return _is_call_of(node.iter, "execute")
    return isinstance(node, ast.Await) and _is_call_of(
        node.value, "fetchone", "fetchall", "fetchmany"
    )


def two_hop_reads(source: str) -> list[int]:
    """Lines reading through an aiosqlite cursor: ``async with x.execute(...)``,
    ``async for`` over one, or an awaited ``fetchone/fetchall/fetchmany`` (a
    sqlite3 cursor's fetch is not awaited, so blocking reads are not caught)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source)) if _two_hops(node))


def test_the_check_sees_every_two_hop_read() -> None:
    source = """
async def f(db, conn):
    async with db.execute("SELECT 1") as cur:
        await cur.fetchone()
    cur = await db.execute("SELECT 1")
    rows = await cur.fetchall()
    async for row in await db.execute("SELECT 1"):
        pass
    conn.execute("SELECT 1").fetchall()
    await fetch_all(db, "SELECT 1")
"""
    assert two_hop_reads(source) == [3, 4, 6, 7]


def test_the_hub_reads_in_one_hop() -> None:
    found = {
        f"{path.relative_to(REPO).as_posix()}:{line}"
        for path in sorted((REPO / "hub").rglob("*.py"))
        if path.relative_to(REPO).as_posix() not in TWO_HOPS_ALLOWED
        for line in two_hop_reads(path.read_text())
    }
    assert found == set(), "read with fetch_one / fetch_all (hub/store/reads.py)"
