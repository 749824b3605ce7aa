"""Crashes of real processes under `mailrun up`: nothing accepted is lost."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from tests.support import wait_for

from ..harness import mailrun_up, recorder_source, restarted_hub

pytestmark = pytest.mark.anyio


async def test_sigkilled_sidecar_restores_and_processes_each_envelope_once(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("held", recorder_source(gate))
        receipts = [(await up.send(dep["address"], f"m{i}")).json() for i in range(10)]
        assert all(rc["status"] == "accepted" for rc in receipts)
        run_id = receipts[0]["run_id"]

        async def all_delivered() -> bool:
            rows = up.query(
                "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ?", dep["id"]
            )
            return len(rows) == 10 and all(s == "delivered" for (s,) in rows)

        await wait_for(all_delivered, what="10 dispatches delivered to the sidecar")
        assert (await up.run(run_id))["state"].get("count") is None

        old_pid = await up.sidecar_pid(dep["id"])
        os.kill(old_pid, signal.SIGKILL)
        await wait_for(lambda: _gone(old_pid), what="the killed sidecar to be reaped")
        gate.touch()
        new_pid = await up.sidecar_pid(dep["id"])
        assert new_pid != old_pid

        run = await up.wait_state(run_id, lambda r: r["state"].get("count") == 10, timeout=30)
        ids = [s["dispatch_id"] for s in run["state"]["seen"]]
        assert ids == [rc["dispatch_id"] for rc in receipts]
        rows = up.query(
            "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ?", dep["id"]
        )
        assert rows == [("processed",)] * 10


async def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_sigkilled_hub_comes_back_and_the_sidecar_reconnects(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("steady", recorder_source())
        warm = (await up.send(dep["address"], "warm-up")).json()
        run_id = warm["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("count") == 1)
        sidecar = await up.sidecar_pid(dep["id"])
        boot_before = (await up.healthz())["boot_id"]

        before = await up.send(dep["address"], "before the kill")
        assert before.status_code == 202
        os.kill(await up.hub_pid(), signal.SIGKILL)

        await restarted_hub(up, boot_before)
        after = await up.send(dep["address"], "after the restart")
        assert after.status_code == 202, after.text

        run = await up.wait_state(run_id, lambda r: r["state"].get("count") == 3, timeout=30)
        assert [s["subject"] for s in run["state"]["seen"]] == [
            "warm-up",
            "before the kill",
            "after the restart",
        ]
        assert await up.sidecar_pid(dep["id"]) == sidecar, "the sidecar must not restart"
