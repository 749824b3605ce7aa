"""Reads on the shared reader connection: one hop each, so a task reading
back what it just committed sees it, however many tasks read meanwhile."""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import pytest

from hub.store import Store, fetch_all, fetch_one, open_store
from tests.support import REPO

pytestmark = pytest.mark.anyio

# Every other aiosqlite read under hub/ is one hop, writer's or reader's: a
# rule with no exception for the reader to slip through. These files read on
# the writer only: migrations and schema steps inside SqliteStore.open (before the
# reader exists).
TWO_HOPS_ALLOWED = {"hub/store/migrations.py", "hub/store/schema.py"}

ROUNDS = 300
READERS = 4


async def _store_with_counter(tmp_path: Path) -> Store:
    store = await open_store(tmp_path / "hub.db")
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


@pytest.mark.slow  # a stress: many commits under concurrent readers
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
