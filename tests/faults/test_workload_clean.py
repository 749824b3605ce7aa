"""The workload and checker against a real `mailrun up`: clean without faults,
and clean through sidecar crashes that `up` repairs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import psutil
import pytest

from tests.e2e.harness import Up, mailrun_up, recorder_source
from tests.support import wait_for

from .harness.observe import check_deployment
from .harness.workload import Workload, WorkloadConfig

pytestmark = pytest.mark.anyio


async def test_a_workload_without_faults_checks_clean(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("load", recorder_source())
        workload = Workload(
            up.url, dep["address"], WorkloadConfig(clients=8, mails_per_client=25), token=up.token
        )
        history = await workload.run()
        assert [op.outcome for op in history.ops] == ["ok"] * 200
        result = await check_deployment(up, history, dep["id"])
        assert result.ok, result.summary()
        assert (result.sent, result.accepted, result.processed) == (200, 200, 200)
        assert result.runs == {dep["id"]: 1}


async def test_a_workload_through_two_sidecar_kills_checks_clean(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("crashy", recorder_source())
        workload = Workload(
            up.url,
            dep["address"],
            WorkloadConfig(clients=8, mails_per_client=25, think=0.15),
            token=up.token,
        )
        kills: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(workload.run)
            await wait_for(lambda: _accepted(workload, 50), what="50 mails accepted")
            kills.append(await _kill_sidecar(up, dep["id"]))
            # Kill the next one once it has taken up the work: mid-processing.
            before = _processed(up, dep["id"])

            async def progressing() -> bool:
                return _processed(up, dep["id"]) > before

            await wait_for(progressing, what="the restarted sidecar processing")
            kills.append(await _kill_sidecar(up, dep["id"]))
            assert len(workload.history.accepted()) < 200, "both kills must hit the workload"
        assert workload.history.accepted() == {op.message_id for op in workload.history.ops}
        result = await check_deployment(up, workload.history, dep["id"])
        assert result.ok, result.summary()
        assert (result.accepted, result.processed) == (200, 200)
        assert await up.sidecar_pid(dep["id"]) not in kills


async def _accepted(workload: Workload, n: int) -> bool:
    return len(workload.history.accepted()) >= n


def _processed(up: Up, deployment_id: str) -> int:
    [(n,)] = up.query(
        "SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ? AND status = ?",
        deployment_id,
        "processed",
    )
    return int(n)


async def _kill_sidecar(up: Up, deployment_id: str) -> int:
    """SIGKILL the deployment's sidecar; return its pid once `up` runs a new one."""
    pid = await up.sidecar_pid(deployment_id)
    os.kill(pid, signal.SIGKILL)

    async def replaced() -> int | None:
        new = await up.sidecar_pid(deployment_id)
        return new if new != pid and _alive(new) else None

    await wait_for(replaced, what="up to restart the sidecar")
    return pid


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
