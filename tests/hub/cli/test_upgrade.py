"""``mailrun migrate [--check]`` on a release-1 state dir, and migrations cut short."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from hub.cli.main import main
from hub.store import DATABASE_ENV, open_store
from hub.store.migrations import LATEST, MIGRATIONS
from hub.store.schema import add_dead_letter_deployment
from runtime.errors import FailpointError
from runtime.testing import configure_failpoints
from tests.legacy.v1fixture import V1State, write_v1_state
from tests.support.servers.postgres import PostgresServer
from tests.support.sqlite import dump
from tests.support.store import migrations_from


@pytest.fixture
def v1(tmp_path: Path) -> V1State:
    return write_v1_state(tmp_path / "state")


@pytest.fixture
def failpoints() -> Iterator[None]:
    yield
    configure_failpoints("")


def files(state_dir: Path) -> dict[str, str]:
    """Every file under ``state_dir`` with its sha256: what "changed nothing" means."""
    return {
        str(p.relative_to(state_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(state_dir.rglob("*"))
        if p.is_file()
    }


def migrate(*args: str) -> str:
    result = CliRunner().invoke(main, ["migrate", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def test_check_reports_every_change_and_makes_none(v1: V1State) -> None:
    before = files(v1.state_dir)
    out = migrate("--check", "--state-dir", str(v1.state_dir))
    assert files(v1.state_dir) == before
    assert f"schema version 1 (this release: {LATEST})" in out
    pending = ", ".join(m.name for m in MIGRATIONS[1:])
    assert pending.startswith("0002_release2_schema, 0003_dead_letter_deployment")
    assert f"would apply: {pending}" in out
    for dep in v1.deployments.values():
        assert f"{dep.id}  release 1 format: will be migrated" in out
        assert f"{dep.id}  release 1 format: will be rewritten" in out

    report = json.loads(migrate("--check", "--json", "--state-dir", str(v1.state_dir)))
    assert files(v1.state_dir) == before
    assert report["hub"]["version"] == 1
    assert report["hub"]["pending"] == migrations_from("0002_release2_schema")
    assert {i["deployment_id"]: i["release1"] for i in report["inboxes"]} == {
        d.id: True for d in v1.deployments.values()
    }
    assert {r["deployment_id"]: r["version"] for r in report["records"]} == {
        d.id: 1 for d in v1.deployments.values()
    }


def test_migrate_applies_the_hub_migrations_and_leaves_the_sidecars_theirs(
    v1: V1State,
) -> None:
    sidecar_files = files(v1.state_dir / "sidecars")
    out = migrate("--state-dir", str(v1.state_dir))
    pending = (
        "0002_release2_schema, 0003_dead_letter_deployment, 0004_owner_home, 0005_nats_user,"
        " 0006_retention_indexes, 0007_run_step, 0008_outbound_mail,"
        " 0009_workflow_versions, 0010_producers, 0011_change_feed, 0012_raw_message,"
        " 0013_hub_leases"
    )
    assert f"applied: {pending}" in out
    db = sqlite3.connect(v1.state_dir / "hub.db")
    try:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(LATEST,)]
        busy = v1["busy"]
        top = db.execute("SELECT is_top_level FROM workflow_run WHERE id = ?", (busy.address,))
        assert top.fetchall() == [(1,)]
    finally:
        db.close()
    assert files(v1.state_dir / "sidecars") == sidecar_files
    again = migrate("--state-dir", str(v1.state_dir))
    assert "up to date" in again and "applied" not in again


def test_migrate_says_each_migration_as_it_is_applied(v1: V1State) -> None:
    # Not a terminal here: a plain line on stderr per migration (stdout is the report).
    result = CliRunner().invoke(main, ["migrate", "--state-dir", str(v1.state_dir)])
    assert result.exit_code == 0, result.output
    pending = MIGRATIONS[1:]
    assert result.stderr.splitlines() == [
        f"mailrun migrate: applied {n} of {len(pending)}: {m.name}"
        for n, m in enumerate(pending, start=1)
    ]


def test_migrate_without_a_hub_database_creates_none(tmp_path: Path) -> None:
    out = migrate("--state-dir", str(tmp_path))
    assert "none yet" in out
    assert list(tmp_path.iterdir()) == []


def test_a_migration_cut_short_leaves_release_1_data_and_the_next_boot_finishes(
    v1: V1State, failpoints: None
) -> None:
    path = v1.state_dir / "hub.db"
    before = dump(path)
    configure_failpoints("hub.migration.after_step=raise")
    with pytest.raises(FailpointError):
        anyio.run(open_store, path)
    assert dump(path) == before  # release 1's tables, rows and version 1, as they were
    configure_failpoints("")
    store = anyio.run(open_store, path)
    anyio.run(store.aclose)
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(LATEST,)]
    finally:
        db.close()


def test_migration_3_is_idempotent_on_its_own(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    anyio.run(_open_close, path)
    before = dump(path)

    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        add_dead_letter_deployment(db)
        db.execute("COMMIT")
    finally:
        db.close()
    assert dump(path) == before


async def _open_close(path: Path) -> None:
    store = await open_store(path)
    await store.aclose()


def test_a_database_newer_than_this_release_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "hub.db")
    db.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL);"
                     "INSERT INTO schema_version VALUES (99);")  # fmt: skip
    db.close()
    before = files(tmp_path)
    for args in (["--check"], []):
        result = CliRunner().invoke(main, ["migrate", "--state-dir", str(tmp_path), *args])
        assert result.exit_code == 1
        assert "migration_failed" in result.stderr and "99" in result.stderr
    assert files(tmp_path) == before


def test_migrate_checks_and_applies_a_postgresql_databases_migrations(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.new_database()
    check = CliRunner().invoke(main, ["migrate", "--check"], env={DATABASE_ENV: url})
    assert check.exit_code == 0, check.output
    assert f"schema version 0 (this release: {LATEST})" in check.output
    assert "0001_release1_schema" in check.output and "0013_hub_leases" in check.output
    applied = CliRunner().invoke(main, ["migrate", "--database", url, "--json"])
    assert applied.exit_code == 0, applied.output
    assert json.loads(applied.output)["applied"] == [m.name for m in MIGRATIONS]
    again = CliRunner().invoke(main, ["migrate", "--check"], env={DATABASE_ENV: url})
    assert again.exit_code == 0 and "nothing to migrate" in again.output
