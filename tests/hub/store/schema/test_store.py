"""Hub store: migrations (fresh, on a release-1 database, twice) and transactions."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hub import MigrationError, StoreConflict, pending_migrations
from hub.store import open_store
from hub.store.migrations import LATEST
from hub.store.sql import Tx, sql
from tests.legacy.v1fixture import HUB_DDL
from tests.support.sqlite import dump
from tests.support.store import execute, migrations_from

pytestmark = pytest.mark.anyio

LIVE = "dep_" + "a" * 26  # live, one mail run with three dispatches and a child run
GONE = "dep_" + "b" * 26  # deleted in release 1
IDLE = "dep_" + "c" * 26  # live, never got mail
SOURCES = '{"entrypoint": "%s", "files": {"x.py": "async def main(ctx, item): pass"}}'


def build_v1(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(HUB_DDL)  # release 1's DDL, as LEGACY-V1.md fixes it
    db.execute("INSERT INTO schema_version VALUES (1)")
    for dep, name, entry, created in (
        (LIVE, "alpha", "x:main", 10.0),
        (GONE, "beta", "x:run", 11.0),
        (IDLE, "gamma", "pkg.x:main", 12.0),
    ):
        db.execute(
            "INSERT INTO deployment VALUES (?, ?, ?, ?, ?, ?)",
            (dep, name, f"{name}@mailrun.local", f"pk-{name}", SOURCES % entry, created),
        )
    runs = [
        (LIVE, LIVE, None, "running", 10.0),  # live anchor
        (GONE, GONE, None, "deleted", 20.0),  # deleted anchor
        (IDLE, IDLE, None, "running", 12.0),
        ("alpha@mailrun.local", LIVE, None, "running", 13.0),  # the top-level run
        ("run_" + "1" * 26, LIVE, "alpha@mailrun.local", "completed", 14.0),
        ("beta@mailrun.local", GONE, None, "cancelled", 15.0),
    ]
    db.executemany(
        "INSERT INTO workflow_run (id, deployment_id, parent_run_id, status, created_at,"
        " updated_at) VALUES (?, ?, ?, ?, ?, ?)",
        [(r[0], r[1], r[2], r[3], r[4], r[4]) for r in runs],
    )
    dispatches = [  # rowid order is acceptance order
        ("dsp_" + "3" * 26, LIVE, "processed", "m-1", b"first"),
        ("dsp_" + "1" * 26, LIVE, "delivered", None, b"second"),
        ("dsp_" + "4" * 26, GONE, "cancelled", "m-1", b"other deployment"),
        ("dsp_" + "2" * 26, LIVE, "reserved", "m-2", b"third" * 10),
    ]
    for dsp, dep, status, mid, body in dispatches:
        address = "alpha@mailrun.local" if dep == LIVE else "beta@mailrun.local"
        db.execute(
            "INSERT INTO workflow_run_dispatch VALUES"
            " (?, ?, ?, 'mail', ?, 'a@b.c', 's', ?, ?, 1.0)",
            (dsp, dep, address, mid, body, status),
        )
    db.commit()
    db.close()


def rows(path: Path, sql: str, *params: object) -> list[dict[str, Any]]:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(sql, params)]
    finally:
        db.close()


async def test_fresh_database_walks_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    assert await pending_migrations(path) == migrations_from("0001_release1_schema")
    assert not path.exists()  # checking does not create it
    store = await open_store(path)
    await store.aclose()
    assert await pending_migrations(path) == []
    assert rows(path, "SELECT version FROM schema_version") == [{"version": LATEST}]
    assert rows(path, "PRAGMA journal_mode") == [{"journal_mode": "wal"}]
    tables = {r["name"] for r in rows(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"deployment", "workflow_run", "workflow_run_dispatch", "blob", "run_event",
            "approval", "dead_letter", "schema_version"} <= tables  # fmt: skip
    before = dump(path)
    store = await open_store(path)
    await store.aclose()
    assert dump(path) == before


async def test_migration_2_upgrades_a_release_1_database(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    build_v1(path)
    assert await pending_migrations(path) == migrations_from("0002_release2_schema")
    store = await open_store(path)
    await store.aclose()

    runs = {r["id"]: r for r in rows(path, "SELECT * FROM workflow_run")}
    assert {k: (runs[k]["is_anchor"], runs[k]["status"]) for k in (LIVE, GONE, IDLE)} == {
        LIVE: (1, "deployed"),
        GONE: (1, "deleted"),
        IDLE: (1, "deployed"),
    }
    top = runs["alpha@mailrun.local"]
    assert (top["is_top_level"], top["is_anchor"], top["status"]) == (1, 0, "running")
    assert runs["beta@mailrun.local"]["is_top_level"] == 1
    assert runs["run_" + "1" * 26]["is_top_level"] == 0
    assert top["last_seq"] == 1  # seq 1 processed, seq 2 only delivered

    deps = {r["id"]: r for r in rows(path, "SELECT * FROM deployment")}
    assert {k: d["entrypoint"] for k, d in deps.items()} == {
        LIVE: "x:main",
        GONE: "x:run",
        IDLE: "pkg.x:main",
    }
    assert deps[GONE]["deleted_at"] == 20.0
    assert deps[LIVE]["deleted_at"] is None
    assert {k: d["next_seq"] for k, d in deps.items()} == {LIVE: 4, GONE: 2, IDLE: 1}

    dispatches = rows(
        path,
        "SELECT id, run_id, seq, status, message_id, body, body_size, body_digest"
        " FROM workflow_run_dispatch WHERE deployment_id = ? ORDER BY seq",
        LIVE,
    )
    assert [(d["id"][4], d["seq"], d["status"]) for d in dispatches] == [
        ("3", 1, "processed"), ("1", 2, "delivered"), ("2", 3, "reserved")
    ]  # fmt: skip
    assert {d["run_id"] for d in dispatches} == {"alpha@mailrun.local"}
    assert [d["body"] for d in dispatches] == [b"first", b"second", b"third" * 10]
    assert [d["body_size"] for d in dispatches] == [5, 6, 50]
    assert [d["message_id"] for d in dispatches] == ["m-1", None, "m-2"]
    assert {d["body_digest"] for d in dispatches} == {None}

    # Migrating again changes nothing; the deleted deployment's name is free.
    before = dump(path)
    store = await open_store(path)
    assert await pending_migrations(path) == []
    await execute(
        store,
        "INSERT INTO deployment (id, name, address, public_key, sources, entrypoint,"
        " created_at) VALUES ('dep_new', 'beta', 'beta@mailrun.local', 'pk-new', '{}',"
        " 'flow:main', 30.0)",
    )
    with pytest.raises(StoreConflict):
        await execute(
            store,
            "INSERT INTO deployment (id, name, address, public_key, sources, entrypoint,"
            " created_at) VALUES ('dep_dup', 'alpha', 'alpha@mailrun.local', 'pk-dup', '{}',"
            " 'flow:main', 30.0)",
        )
    await store.aclose()
    added = sorted(set(dump(path)) - set(before))
    assert len(dump(path)) == len(before) + len(added)
    # The deployment, and what the change feed recorded of it (its row, its id counter).
    assert [line.split(" VALUES")[0] for line in added] == [
        'INSERT INTO "change"',
        'INSERT INTO "deployment"',
        'INSERT INTO "sqlite_sequence"',
    ]


async def test_a_second_top_level_run_fails_loudly(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    build_v1(path)
    async with await open_store(path) as store:
        with pytest.raises(StoreConflict):
            await execute(
                store,
                "INSERT INTO workflow_run (id, deployment_id, is_top_level, status,"
                " created_at, updated_at) VALUES ('run_x', ?, 1, 'running', 1, 1)",
                LIVE,
            )
        assert rows(path, "SELECT COUNT(*) AS n FROM workflow_run WHERE id = 'run_x'") == [{"n": 0}]


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL);"
                     "INSERT INTO schema_version VALUES (99);")  # fmt: skip
    db.close()
    with pytest.raises(MigrationError):
        await pending_migrations(path)
    with pytest.raises(MigrationError):
        await open_store(path)


_INSERT = sql(
    "INSERT INTO deployment (id, name, address, public_key, sources, entrypoint,"
    " created_at) VALUES (?, ?, ?, ?, '{}', 'flow:main', 1)"
)
_NAMES = sql("SELECT name FROM deployment ORDER BY name")


async def test_a_transaction_rolls_back_and_reads_see_only_commits(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    async with await open_store(path) as store:

        async def names() -> list[str]:
            return [r[0] for r in await store.read(lambda tx: tx.fetch_all(_NAMES))]

        def failing(tx: Tx) -> None:
            tx.execute(_INSERT, ("dep_1", "one", "one@x", "pk1"))
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            await store.transact(failing)
        assert await names() == []
        seen: list[list[dict[str, object]]] = []

        def insert(tx: Tx) -> None:
            tx.execute(_INSERT, ("dep_2", "two", "two@x", "pk2"))
            # Not committed yet: another connection (as the reader is) sees nothing.
            seen.append(rows(path, "SELECT name FROM deployment"))

        await store.transact(insert)
        assert seen == [[]]
        assert await names() == ["two"]
