"""hub.store.sql: statements declared once per database, their PostgreSQL
parameters numbered at declaration, every declared statement taken by both
databases, and a body's view of a transaction the same on both."""

from __future__ import annotations

import importlib
import pkgutil
import re
import sqlite3
from pathlib import Path

import asyncpg
import pytest

import hub.store
from hub import StoreConflict
from hub.store import SqliteStore, open_store
from hub.store.sql import DECLARED, SIZES, Grouped, Statement, Tx, sql
from tests.support.servers.postgres import PostgresServer

pytestmark = pytest.mark.anyio

_COUNT = sql("SELECT COUNT(*) FROM producer WHERE name = :name OR id = :name")


def test_named_parameters_are_numbered_once_each_in_order() -> None:
    s = sql("SELECT a FROM t WHERE b = :b AND c = :c AND d = :b")
    assert s.postgres == "SELECT a FROM t WHERE b = $1 AND c = $2 AND d = $1"
    assert s.names == ("b", "c")
    assert s.args({"c": 3, "b": 2}) == [2, 3]
    DECLARED.remove(s)


def test_positional_and_numbered_parameters() -> None:
    plain = sql("UPDATE t SET a = ? WHERE b = ?")
    numbered = sql("SELECT 1 WHERE ?1 = ?2 OR ?2 = ?1")
    DECLARED.remove(plain)
    DECLARED.remove(numbered)
    assert plain.postgres == "UPDATE t SET a = $1 WHERE b = $2"
    assert numbered.postgres == "SELECT 1 WHERE $1 = $2 OR $2 = $1"
    assert plain.names is None and plain.args((1, 2)) == (1, 2)
    with pytest.raises(TypeError):
        plain.args({"a": 1})


def test_quoted_text_and_casts_are_not_parameters() -> None:
    s = sql(
        "SELECT ':no', \"?\" FROM t WHERE x = :x",
        postgres="SELECT ':no', \"?\" FROM t WHERE x = CAST(:x AS text)::json",
    )
    DECLARED.remove(s)
    assert s.sqlite == "SELECT ':no', \"?\" FROM t WHERE x = :x"
    assert s.postgres == "SELECT ':no', \"?\" FROM t WHERE x = CAST($1 AS text)::json"


def test_a_declaration_refuses_mixed_or_mismatched_parameters() -> None:
    before = list(DECLARED)
    with pytest.raises(ValueError, match="one kind"):
        sql("SELECT ? WHERE a = :a")
    with pytest.raises(ValueError, match="same kind"):
        sql("SELECT :a", postgres="SELECT ?")
    with pytest.raises(ValueError, match="same parameters"):
        sql("SELECT :a", postgres="SELECT :b")
    assert before == DECLARED


def _declared() -> list[Statement]:
    """Every statement the hub's modules declare (importing the store's)."""
    for module in pkgutil.walk_packages(hub.store.__path__, "hub.store."):
        importlib.import_module(module.name)
    return [s for s in DECLARED if s.module.startswith("hub.")]


def _arguments(statement: Statement) -> int:
    return max((int(n) for n in re.findall(r"\$(\d+)", statement.postgres)), default=0)


async def test_every_declared_statement_is_taken_by_sqlite(tmp_path: Path) -> None:
    statements = _declared()
    async with await open_store(tmp_path / "hub.db") as store:

        def explain(tx: Tx) -> list[str]:
            refused = []
            for s in statements:
                params: object = dict.fromkeys(s.names) if s.names else (None,) * _arguments(s)
                try:
                    tx.fetch_all(sql_explain(s), params)  # type: ignore[arg-type]
                except Exception as exc:
                    refused.append(f"{s.sqlite[:80]!r}: {exc}")
            return refused

        assert await store.read(explain) == []


async def test_no_declared_statement_is_compiled_again_at_every_run(tmp_path: Path) -> None:
    """SQLite compiles a statement again whenever it is bound anew if a bound
    value could decide whether a partial index applies (``status = ?`` on a
    table with an index ``WHERE status = 'parked'``): as if the schema had
    changed, at every run (the lane's load cost 88 us instead of 8). Each
    declared statement is explained twice; an authorizer, which SQLite calls
    only while compiling, must not be called the second time."""
    statements = _kept_by_modules()
    async with await SqliteStore.open(tmp_path / "hub.db") as store:

        def compiled_again(conn: sqlite3.Connection) -> list[str]:
            calls: list[object] = []

            def authorizer(*args: object) -> int:
                calls.append(args)
                return sqlite3.SQLITE_OK

            conn.set_authorizer(authorizer)
            again = []
            try:
                for s in statements:
                    params = dict.fromkeys(s.names) if s.names else (None,) * _arguments(s)
                    conn.execute(f"EXPLAIN {s.sqlite}", params).fetchall()
                    calls.clear()
                    conn.execute(f"EXPLAIN {s.sqlite}", params).fetchall()
                    if calls:
                        again.append(f"{s.module}: {' '.join(s.sqlite.split())[:100]}")
            finally:
                conn.set_authorizer(None)
            return again

        assert await store._reader.read(compiled_again) == []


def _kept_by_modules() -> list[Statement]:
    """The statements the store's modules keep (a test may declare its own
    through the store's helpers: those are not the hub's)."""
    kept: dict[int, Statement] = {}
    for module in pkgutil.walk_packages(hub.store.__path__, "hub.store."):
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, Grouped):
                value = {n: value[n] for n in SIZES}
            found = value.values() if isinstance(value, dict) else [value]
            kept.update((id(s), s) for s in found if isinstance(s, Statement))
    assert len(kept) > 200  # every module's, not a few
    return list(kept.values())


def sql_explain(statement: Statement) -> Statement:
    explained = Statement.__new__(Statement)
    explained.sqlite = f"EXPLAIN {statement.sqlite}"
    explained.postgres = statement.postgres
    explained.names = statement.names
    return explained


async def test_every_declared_statement_is_taken_by_postgresql(
    postgres_server: PostgresServer,
) -> None:
    statements = _declared()
    url = postgres_server.new_database()
    async with await open_store(url):  # migrated
        pass
    conn = await asyncpg.connect(url)
    refused = []
    try:
        for s in statements:
            try:
                await conn.prepare(s.postgres)
            except asyncpg.PostgresError as exc:
                refused.append(f"{s.postgres[:80]!r}: {exc}")
    finally:
        await conn.close()
    assert refused == []


_ADD = sql("INSERT INTO schema_version (version) VALUES (?)")


@pytest.mark.parametrize("which", ["sqlite", "postgresql"])
async def test_a_body_reads_writes_and_conflicts_alike_on_both(
    which: str, tmp_path: Path, postgres_server: PostgresServer
) -> None:
    target = str(tmp_path / "hub.db") if which == "sqlite" else postgres_server.new_database()
    async with await open_store(target) as store:

        def body(tx: Tx) -> tuple[int, int]:
            (before,) = tx.fetch_one(_COUNT, {"name": "nobody"}) or (None,)
            changed = tx.execute(_ADD, (1000,))
            return int(before), changed

        assert await store.transact(body) == (0, 1)
        rows = await store.read(lambda tx: tx.fetch_all(_VERSIONS))
        assert [r["version"] for r in rows][-1] == 1000
        assert await store.read(lambda tx: tx.fetch_one(_NONE)) is None
        # A unique constraint broken: the store's own error on both databases.
        with pytest.raises(StoreConflict):
            await store.transact(lambda tx: tx.execute_many(_PRODUCER, [("a", "u1"), ("b", "u2")]))
        assert await store.read(lambda tx: tx.fetch_all(_PRODUCERS)) == []


_VERSIONS = sql("SELECT version FROM schema_version ORDER BY version")
_NONE = sql("SELECT version FROM schema_version WHERE version < 0")
_PRODUCER = sql("INSERT INTO producer (id, name, nats_user, created_at) VALUES ('p', ?, ?, 0)")
_PRODUCERS = sql("SELECT id FROM producer")
