"""An embedded state moved to PostgreSQL: `mailrun up` on SQLite, stopped,
`mailrun migrate --to URL`, `mailrun up --database URL` on the same state
dir: the same deployment, run and state carry on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest

from hub.store import open_store
from tests.support.servers.postgres import PostgresServer
from tests.support.store import rows

from ..harness import MAILRUN, mailrun_up, recorder_source

pytestmark = pytest.mark.anyio


async def test_a_state_moved_to_postgresql_carries_on(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    url = postgres_server.new_database()
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("orders", recorder_source())
        receipts = [
            (await up.send(dep["address"], f"mail {n}", "x" * (70_000 * n))).json()
            for n in range(3)
        ]
        (run_id,) = {r["run_id"] for r in receipts}
        await up.wait_state(run_id, lambda r: r["state"].get("count") == 3)
        before = {
            table: up.query(f"SELECT COUNT(*) FROM {table}")[0][0]
            for table in (
                "deployment",
                "workflow_run",
                "workflow_run_dispatch",
                "run_event",
                "change",
            )
        }
        last_change = up.query("SELECT MAX(id) FROM change")[0][0]

    state = tmp_path / "state"
    # The URL from the environment: a password stays out of argv.
    argv = [MAILRUN, "migrate", "--state-dir", str(state)]
    env = {**os.environ, "MAILRUN_MIGRATE_TO": url}
    done = await anyio.run_process(argv, env=env, check=False, stderr=subprocess.STDOUT)
    output = done.stdout.decode()
    assert done.returncode == 0, output
    assert "copied" in output
    again = await anyio.run_process(argv, env=env, check=False, stderr=subprocess.STDOUT)
    assert again.returncode == 1 and "holds hub data already" in again.stdout.decode()

    async with await open_store(url) as store:
        for table, count in before.items():
            assert await rows(store, f"SELECT COUNT(*) FROM {table}") == [(count,)], table

    async with mailrun_up(tmp_path, database=url) as up:
        r = await up.send(dep["address"], "after the move")
        assert r.status_code == 202, r.text
        assert (r.json()["run_id"], r.json()["seq"]) == (run_id, 4)
        run = await up.wait_state(run_id, lambda r: r["state"].get("count") == 4, timeout=30)
        assert [s["subject"] for s in run["state"]["seen"]][-1] == "after the move"
        assert up.query(
            "SELECT MIN(id) > ? FROM change WHERE row_id = ?", last_change, r.json()["dispatch_id"]
        ) == [(True,)]
