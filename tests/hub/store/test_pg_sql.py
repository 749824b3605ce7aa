"""The store's SQL in PostgreSQL's spelling (hub/store/pg/_sql.py)."""

from __future__ import annotations

import pytest

from hub.store import fetch_all, open_store
from hub.store.pg import translate
from tests.support.postgres import PostgresServer


def test_placeholders_become_psycopgs_and_numbered_ones_reorder_the_parameters() -> None:
    text, reorder = translate("SELECT a FROM t WHERE b = ? AND c IN (?, ?)")
    assert text == "SELECT a FROM t WHERE b = %s AND c IN (%s, %s)"
    assert reorder((1, 2, 3)) == (1, 2, 3)
    text, reorder = translate("SELECT 1 WHERE x = ?1 AND y = ?2 OR z = ?1")
    assert text == "SELECT 1 WHERE x = %s AND y = %s OR z = %s"
    assert reorder(("a", "b")) == ["a", "b", "a"]
    text, reorder = translate("UPDATE t SET a = :value WHERE id = :id")
    assert text == "UPDATE t SET a = %(value)s WHERE id = %(id)s"
    assert reorder({"value": 1, "id": 2}) == {"value": 1, "id": 2}


def test_quoted_text_and_casts_are_left_alone_and_percent_is_escaped() -> None:
    text, _ = translate("SELECT '?:x', \"a?\", b::text FROM t WHERE c LIKE 'x%' AND d = ?")
    assert text == "SELECT '?:x', \"a?\", b::text FROM t WHERE c LIKE 'x%%' AND d = %s"
    text, _ = translate("SELECT a % 2 FROM t")
    assert text == "SELECT a %% 2 FROM t"


def test_null_safe_comparisons_and_scalar_min_max() -> None:
    text, _ = translate("UPDATE t SET a = 1 WHERE b IS ? AND c IS NOT ? AND d IS NULL")
    assert text == (
        "UPDATE t SET a = 1 WHERE b IS NOT DISTINCT FROM %s AND c IS DISTINCT FROM %s AND d IS NULL"
    )
    text, _ = translate("SELECT MIN(seq), MAX(a, (SELECT MIN(x) FROM y), 'a,b'), min(b + 1, 3)")
    assert text == ("SELECT MIN(seq), GREATEST(a, (SELECT MIN(x) FROM y), 'a,b'), LEAST(b + 1, 3)")


def test_insert_or_ignore_empty_lists_and_json_each() -> None:
    text, _ = translate("INSERT OR IGNORE INTO blob (digest) VALUES (?);")
    assert text == "INSERT INTO blob (digest) VALUES (%s) ON CONFLICT DO NOTHING"
    text, _ = translate("SELECT 1 FROM t WHERE a IN () OR b NOT IN ( )")
    assert text == (
        "SELECT 1 FROM t WHERE a IN (SELECT NULL WHERE FALSE) OR b NOT IN (SELECT NULL WHERE FALSE)"
    )
    text, _ = translate("SELECT id FROM t WHERE id IN (SELECT value FROM json_each(?))")
    assert text == (
        "SELECT id FROM t WHERE id IN"
        " (SELECT value FROM json_array_elements_text(CAST(%s AS json)))"
    )


@pytest.mark.anyio
async def test_the_translated_statements_run_on_postgresql(postgres_server: PostgresServer) -> None:
    async with await open_store(postgres_server.new_database()) as store:
        rows = await fetch_all(
            store.db,
            "SELECT 'x%y' LIKE ?1, ?2 IS NULL, ?1 || '?' AS joined, 7 % 4 AS rest",
            ("x%", None),
        )
        assert [tuple(row) for row in rows] == [(True, True, "x%?", 3)]
        assert rows[0]["JOINED"] == "x%?" and rows[0]["rest"] == 3
        ids = await fetch_all(
            store.db, "SELECT value FROM json_each(?) WHERE value NOT IN ()", ('["a", "b"]',)
        )
        assert [row[0] for row in ids] == ["a", "b"]
