"""The store's SQL in PostgreSQL's spelling (hub/store/pg/_sql.py)."""

from __future__ import annotations

import pytest

from hub.store import fetch_all, open_store
from hub.store.pg._sql import translate
from tests.support.postgres import PostgresServer


def test_placeholders_become_numbered_and_named_ones_take_the_mappings_values() -> None:
    statement = translate("SELECT a FROM t WHERE b = ? AND c IN (?, ?)")
    assert statement.text == "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)"
    assert statement.args((1, 2, 3)) == [1, 2, 3]
    statement = translate("SELECT 1 WHERE x = ?1 AND y = ?2 OR z = ?1")
    assert statement.text == "SELECT 1 WHERE x = $1 AND y = $2 OR z = $1"
    assert statement.args(("a", "b")) == ["a", "b"]
    statement = translate("UPDATE t SET a = :value WHERE id = :id OR b = :value")
    assert statement.text == "UPDATE t SET a = $1 WHERE id = $2 OR b = $1"
    assert statement.args({"id": 2, "value": 1}) == [1, 2]
    assert not statement.returns_rows
    assert translate("UPDATE t SET a = 1 RETURNING id").returns_rows
    assert translate("WITH x AS (SELECT 1) SELECT * FROM x").returns_rows


@pytest.mark.parametrize(
    ("sqlite", "postgres"),
    [
        pytest.param(
            "SELECT '?:x', \"a?\", b::text FROM t WHERE c LIKE 'x%' AND d = ?",
            "SELECT '?:x', \"a?\", b::text FROM t WHERE c LIKE 'x%' AND d = $1",
            id="quoted text and casts are left alone",
        ),
        pytest.param(
            "UPDATE t SET a = 1 WHERE b IS ? AND c IS NOT ? AND d IS NULL",
            "UPDATE t SET a = 1 WHERE b IS NOT DISTINCT FROM $1 AND c IS DISTINCT FROM $2"
            " AND d IS NULL",
            id="null-safe comparisons",
        ),
        pytest.param(
            "SELECT MIN(seq), MAX(a, (SELECT MIN(x) FROM y), 'a,b'), min(b + 1, 3)",
            "SELECT MIN(seq), GREATEST(a, (SELECT MIN(x) FROM y), 'a,b'), LEAST(b + 1, 3)",
            id="scalar min and max",
        ),
        pytest.param(
            "INSERT OR IGNORE INTO blob (digest) VALUES (?);",
            "INSERT INTO blob (digest) VALUES ($1) ON CONFLICT DO NOTHING",
            id="insert or ignore",
        ),
        pytest.param(
            "SELECT 1 FROM t WHERE a IN () OR b NOT IN ( )",
            "SELECT 1 FROM t WHERE a IN (SELECT NULL WHERE FALSE)"
            " OR b NOT IN (SELECT NULL WHERE FALSE)",
            id="empty lists",
        ),
        pytest.param(
            "SELECT id FROM t WHERE id IN (SELECT value FROM json_each(?))",
            "SELECT id FROM t WHERE id IN"
            " (SELECT value FROM json_array_elements_text(CAST($1 AS json)))",
            id="json_each",
        ),
    ],
)
def test_sqlite_spellings_become_postgresql_ones(sqlite: str, postgres: str) -> None:
    assert translate(sqlite).text == postgres


@pytest.mark.anyio
async def test_the_translated_statements_run_on_postgresql(postgres_server: PostgresServer) -> None:
    async with await open_store(postgres_server.new_database()) as store:
        rows = await fetch_all(
            store.db,
            "SELECT 'x%y' LIKE ?1 AS matched, ?1 || '?' AS joined, 7 % 4 AS rest,"
            " MIN(?2, 3) AS least",
            ("x%", 5),
        )
        assert [tuple(row) for row in rows] == [(True, "x%?", 3, 3)]
        assert rows[0]["joined"] == "x%?" and rows[0]["rest"] == 3
        ids = await fetch_all(
            store.db, "SELECT value FROM json_each(?) WHERE value NOT IN ()", ('["a", "b"]',)
        )
        assert [row[0] for row in ids] == ["a", "b"]
        cur = await store.db.execute(
            "UPDATE deployment SET next_seq = next_seq WHERE owner_instance IS ?", (None,)
        )
        assert cur.rowcount == 0  # counted, not -1: a command's status is read
