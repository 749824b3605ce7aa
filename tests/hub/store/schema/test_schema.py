"""One schema, two DDLs: the SQLite schema its migrations build (from release
1's, through every rebuild) and the PostgreSQL schema its own migrations
build (schema 12 in one script, then each later step) are the same, table
by table: names, columns in order, NOT NULL, primary keys, unique
constraints, indexes (by name, columns, uniqueness and partial predicate)
and the triggers that feed the change table. Types are not compared: each
database has its own (``INTEGER``/``BIGINT``, ``REAL``/``DOUBLE
PRECISION``, ``BLOB``/``BYTEA``)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from hub.store import open_store
from tests.support.servers.postgres import PostgresServer

pytestmark = pytest.mark.anyio

# The one column PostgreSQL has that SQLite has implicitly: tables whose
# reads are ordered by SQLite's rowid have it as a BIGSERIAL (schema_pg.py).
IMPLICIT_ROWID = {"run_event", "outbound_mail"}


@dataclass
class Table:
    columns: list[tuple[str, bool]] = field(default_factory=list)  # (name, NOT NULL)
    primary_key: tuple[str, ...] = ()
    unique: set[tuple[str, ...]] = field(default_factory=set)  # constraints, unnamed
    indexes: dict[str, tuple[tuple[str, ...], bool, str]] = field(default_factory=dict)
    triggers: dict[str, str] = field(default_factory=dict)  # name -> "AFTER UPDATE OF a, b"


def _predicate(text: str | None) -> str:
    """A partial index's WHERE, spelled alike: lower case, no parentheses or
    spaces, no casts (PostgreSQL writes a text literal ``'x'::text``)."""
    return re.sub(r"[()\s]|::\w+", "", (text or "").lower())


def sqlite_schema(path: Path) -> dict[str, Table]:
    conn = sqlite3.connect(path)
    try:
        names = [
            n
            for (n,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        schema: dict[str, Table] = {}
        for name in names:
            table = schema[name] = Table()
            info = conn.execute('SELECT name, "notnull", pk FROM pragma_table_info(?)', (name,))
            keyed: list[tuple[int, str]] = []
            for column, notnull, pk in info:
                table.columns.append((column, bool(notnull) or pk > 0))
                if pk:
                    keyed.append((pk, column))
            table.primary_key = tuple(c for _, c in sorted(keyed))
            for index, unique, origin, partial in conn.execute(
                'SELECT name, "unique", origin, partial FROM pragma_index_list(?)', (name,)
            ):
                columns = tuple(
                    c for (c,) in conn.execute(
                        "SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,)
                    )
                )  # fmt: skip
                if origin == "u":
                    table.unique.add(columns)
                elif origin == "c":
                    (ddl,) = conn.execute(
                        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", (index,)
                    ).fetchone()
                    where = ddl.split(" WHERE ", 1)[1] if partial else None
                    table.indexes[index] = (columns, bool(unique), _predicate(where))
        for trigger, table_name, ddl in conn.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'"
        ):
            event = re.search(
                r"\b(AFTER|BEFORE)\s+(INSERT|DELETE|UPDATE(?:\s+OF\s+[\w\s,]+?)?)\s+ON\b", ddl
            )
            assert event is not None, ddl
            schema[table_name].triggers[trigger] = _event(event.group(1), event.group(2))
        return schema
    finally:
        conn.close()


def _event(timing: str, event: str) -> str:
    """``AFTER UPDATE OF a, b`` spelled alike (columns sorted)."""
    kind, _, columns = event.partition(" OF ")
    listed = ", ".join(sorted(c.strip() for c in columns.split(","))) if columns else ""
    return f"{timing} {kind.strip()}" + (f" OF {listed}" if listed else "")


async def postgres_schema(url: str) -> dict[str, Table]:
    conn = await asyncpg.connect(url)
    try:
        return await _postgres_schema(conn)
    finally:
        await conn.close()


async def _postgres_schema(conn: Any) -> dict[str, Table]:
    schema: dict[str, Table] = {}
    for (name,) in await conn.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        " AND table_type = 'BASE TABLE' ORDER BY table_name"
    ):
        table = schema[name] = Table()
        for column, nullable in await conn.fetch(
            "SELECT column_name, is_nullable FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
            name,
        ):
            if not (name in IMPLICIT_ROWID and column == "rowid"):
                table.columns.append((column, nullable == "NO"))
    rows = await conn.fetch(
        """
        SELECT t.relname AS tbl, i.relname AS idx, x.indisprimary AS pk, x.indisunique AS uq,
               c.contype::text AS constraint_type, pg_get_expr(x.indpred, x.indrelid) AS predicate,
               ARRAY(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY k(n, at)
                     JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n
                     ORDER BY k.at) AS columns
        FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace s ON s.oid = t.relnamespace
        LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.contype IN ('p', 'u')
        WHERE s.nspname = 'public'
        """
    )
    for row in rows:
        table, columns = schema[row["tbl"]], tuple(row["columns"])
        if row["tbl"] in IMPLICIT_ROWID and columns == ("rowid",):
            continue
        if row["pk"]:
            table.primary_key = columns
        elif row["constraint_type"] == "u":
            table.unique.add(columns)
        else:
            table.indexes[row["idx"]] = (columns, bool(row["uq"]), _predicate(row["predicate"]))
    triggers: dict[tuple[str, str], tuple[str, str, set[str]]] = {}
    for trigger, table_name, timing, event in await conn.fetch(
        "SELECT trigger_name, event_object_table, action_timing, event_manipulation"
        " FROM information_schema.triggers WHERE trigger_schema = 'public'"
    ):
        triggers[trigger, table_name] = (timing, event, set())
    for trigger, table_name, column in await conn.fetch(
        "SELECT trigger_name, event_object_table, event_object_column"
        " FROM information_schema.triggered_update_columns WHERE trigger_schema = 'public'"
    ):
        triggers[trigger, table_name][2].add(column)
    for (trigger, table_name), (timing, event, columns) in triggers.items():
        listed = f" OF {', '.join(sorted(columns))}" if columns else ""
        schema[table_name].triggers[trigger] = f"{timing} {event}{listed}"
    return schema


def differences(sqlite: dict[str, Table], postgres: dict[str, Table]) -> list[str]:
    """What one schema has that the other has not, one line each."""
    out: list[str] = []
    for name in sorted(set(sqlite) | set(postgres)):
        if name not in postgres or name not in sqlite:
            out.append(f"table {name}: only on {'sqlite' if name in sqlite else 'postgresql'}")
            continue
        mine, theirs = sqlite[name], postgres[name]
        if mine.columns != theirs.columns:
            out.append(
                f"table {name}: columns (name, NOT NULL) differ:\n"
                f"  sqlite:     {_columns(mine.columns)}\n  postgresql: {_columns(theirs.columns)}"
            )
        for what in ("primary_key", "unique", "indexes", "triggers"):
            a, b = getattr(mine, what), getattr(theirs, what)
            if a != b:
                out.extend(f"table {name}: {what}: {line}" for line in _diff(a, b))
    return out


def _columns(columns: Iterable[tuple[str, bool]]) -> str:
    return ", ".join(f"{c}{' NOT NULL' if n else ''}" for c, n in columns)


def _diff(sqlite: Any, postgres: Any) -> list[str]:
    if isinstance(sqlite, dict):
        keys = sorted(set(sqlite) | set(postgres))
        return [
            f"{k}: sqlite {sqlite.get(k)!r}, postgresql {postgres.get(k)!r}"
            for k in keys
            if sqlite.get(k) != postgres.get(k)
        ]
    if isinstance(sqlite, set):
        return [
            f"sqlite only {sorted(sqlite - postgres)}, postgresql only {sorted(postgres - sqlite)}"
        ]
    return [f"sqlite {sqlite!r}, postgresql {postgres!r}"]


async def test_sqlite_and_postgresql_build_one_schema(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    path = tmp_path / "hub.db"
    async with await open_store(path):
        pass
    url = postgres_server.new_database()
    async with await open_store(url):
        pass
    sqlite, postgres = sqlite_schema(path), await postgres_schema(url)
    assert "change" in sqlite and sqlite["workflow_run_dispatch"].triggers  # it read something
    found = differences(sqlite, postgres)
    assert not found, "the two schemas differ:\n" + "\n".join(found)


def test_a_difference_reads_plainly() -> None:
    """What the check says when the schemas drift."""
    sqlite = {"t": Table(columns=[("id", True), ("a", True)], primary_key=("id",)), "only": Table()}
    postgres = {
        "t": Table(
            columns=[("id", True), ("a", False)],
            primary_key=("id",),
            indexes={"t_a": (("a",), False, "")},
            triggers={"t_new": "AFTER INSERT"},
        )
    }
    assert differences(sqlite, postgres) == [
        "table only: only on sqlite",
        "table t: columns (name, NOT NULL) differ:\n"
        "  sqlite:     id NOT NULL, a NOT NULL\n  postgresql: id NOT NULL, a",
        "table t: indexes: t_a: sqlite None, postgresql (('a',), False, '')",
        "table t: triggers: t_new: sqlite None, postgresql 'AFTER INSERT'",
    ]
