"""Ownership across real processes (docs/design.md section 7, guarantee 6): a copied
state dir cannot split the brain, a takeover carries the hub's state, a
stopped owner resumed after a takeover is a zombie, and a deletion fences."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from runtime import SidecarExit
from tests.support import wait_for

from ..harness import Up, mailrun_up, read_json

pytestmark = pytest.mark.anyio

# Records which process handled each item; with a gate file, each item waits
# for it; with SINK, each item mails that address.
PID_RECORDER = """
import os

import anyio

GATE = {gate!r}
SINK = {sink!r}


async def main(ctx, item):
    if GATE is not None:
        while not os.path.exists(GATE):
            await anyio.sleep(0.01)
    seen = ctx.state.setdefault("seen", [])
    seen.append({{"subject": item.subject, "pid": os.getpid()}})
    ctx.state["count"] = len(seen)
    if SINK is not None:
        ctx.send(SINK, "echo " + item.subject, item.text)
"""


def pid_recorder(gate: Path | None = None, sink: str | None = None) -> str:
    return PID_RECORDER.format(gate=None if gate is None else str(gate), sink=sink)


class Standalone:
    """``python -m sidecar`` outside ``mailrun up``, on a state dir of its own."""

    def __init__(self, state_dir: Path, dep_id: str, nats_url: str, *extra: str) -> None:
        self.log = state_dir.with_suffix(".log")
        argv = [sys.executable, "-m", "sidecar", "--state-dir", str(state_dir)]
        argv += ["--deployment", dep_id, "--nats", nats_url, *extra]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    async def exit_code(self, timeout: float = 20.0) -> int:
        code = await wait_for(
            lambda: self.proc.poll() is not None, timeout=timeout, what="the sidecar to exit"
        )
        assert code
        return int(self.proc.returncode)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def copy_home(up: Up, dep_id: str, to: Path) -> Path:
    """A copy of the state dir of ``up``'s sidecar for ``dep_id``, taken while
    it is idle (a copy taken mid-write could tear the SQLite files)."""
    shutil.copytree(up.state_dir / "sidecars" / dep_id, to)
    return to


@asynccontextmanager
async def standalone(
    up: Up, state_dir: Path, dep_id: str, *extra: str
) -> AsyncIterator[Standalone]:
    """A standalone sidecar on ``state_dir``, on ``up``'s NATS server."""
    nats_url = read_json(up.state_dir / "up.json")["nats_url"]
    car = Standalone(state_dir, dep_id, nats_url, *extra)
    try:
        yield car
    except BaseException:
        print(f"----- {car.log.name}\n{car.log.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        car.stop()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def seen_pids(up: Up, run_id: str, count: int) -> list[dict[str, Any]]:
    run = await up.wait_state(run_id, lambda r: r["state"].get("count") == count, timeout=60)
    seen: list[dict[str, Any]] = run["state"]["seen"]
    return seen


async def test_a_copied_state_dir_is_refused_or_takes_over_and_nothing_splits(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("moved", pid_recorder())
        first = [(await up.send(dep["address"], f"a{i}")).json() for i in range(5)]
        run_id = first[0]["run_id"]
        await seen_pids(up, run_id, 5)
        old_pid = await up.sidecar_pid(dep["id"])

        plain_dir = copy_home(up, dep["id"], tmp_path / "plain")
        taker_dir = copy_home(up, dep["id"], tmp_path / "taker")
        sent = [f"a{i}" for i in range(5)]
        streaming, enough, ended = anyio.Event(), anyio.Event(), anyio.Event()

        async def stream() -> None:
            # Mail keeps coming through the move, until the new owner has
            # handled some (bounded: a stuck move fails the test, not the loop).
            try:
                for i in range(2000):
                    if enough.is_set():
                        return
                    receipt = await up.send(dep["address"], f"b{i}")
                    assert receipt.status_code == 202, receipt.text
                    sent.append(f"b{i}")
                    if i == 2:
                        streaming.set()
                raise AssertionError("the new owner processed nothing of 2000 mails")
            finally:
                ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stream)
            await streaming.wait()
            async with (
                standalone(up, plain_dir, dep["id"]) as plain,
                standalone(up, taker_dir, dep["id"], "--takeover") as taker,
            ):
                new_pid = taker.proc.pid
                # The plain copy is refused while an owner lives, whichever
                # of the two claimed first.
                assert await plain.exit_code() == SidecarExit.OWNER_CONFLICT
                # The old owner is fenced and stops; up does not restart it.
                await wait_for(lambda: gone(old_pid), timeout=30, what="the old owner to exit")

                async def taker_works() -> bool:
                    run = await up.run(run_id)
                    return any(s["pid"] == new_pid for s in run["state"].get("seen", []))

                await wait_for(taker_works, timeout=30, what="the new owner to process mail")
                enough.set()
                await ended.wait()
                seen = await seen_pids(up, run_id, len(sent))
                assert taker.proc.poll() is None
                assert up.find("sidecar", dep["id"]) is None, "up restarted the moved sidecar"
        # Every mail once, in order, those before the move included.
        assert [s["subject"] for s in seen] == sent
        pids = [s["pid"] for s in seen]
        # One switch from the old owner to the new one, never back.
        switch = pids.index(new_pid)
        assert set(pids[:switch]) == {old_pid} and set(pids[switch:]) == {new_pid}
        rows = up.query(
            "SELECT status, COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ?"
            " GROUP BY status",
            dep["id"],
        )
        assert rows == [("processed", len(sent))]


async def test_a_stopped_owner_resumed_after_a_takeover_gets_nothing_applied(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("zombie", pid_recorder(gate))
        gate.touch()
        warm = (await up.send(dep["address"], "warm")).json()
        run_id = warm["run_id"]
        await seen_pids(up, run_id, 1)
        old_pid = await up.sidecar_pid(dep["id"])
        # Held: the owner takes these in and then stops, mid-work.
        gate.unlink()
        held = [(await up.send(dep["address"], f"h{i}")).json() for i in range(3)]

        async def delivered() -> bool:
            rows = up.query(
                "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ? AND seq > 1",
                dep["id"],
            )
            return [s for (s,) in rows] == ["delivered"] * len(held)

        await wait_for(delivered, what="the held mail delivered to the owner")
        os.kill(old_pid, signal.SIGSTOP)
        try:
            taker_dir = copy_home(up, dep["id"], tmp_path / "taker")
            async with standalone(up, taker_dir, dep["id"], "--takeover") as taker:
                gate.touch()
                after = [(await up.send(dep["address"], f"n{i}")).json() for i in range(3)]
                seen = await seen_pids(up, run_id, 7)
                os.kill(old_pid, signal.SIGCONT)
                # The zombie wakes up holding processed work; it applies none
                # of it, hears it was fenced, and exits.
                await wait_for(lambda: gone(old_pid), timeout=30, what="the zombie to exit")
                run = await up.run(run_id)
                assert run["state"]["seen"] == seen, "the zombie changed the hub's state"
                assert taker.proc.poll() is None
        finally:
            if not gone(old_pid):
                os.kill(old_pid, signal.SIGCONT)
    subjects = ["warm", *(f"h{i}" for i in range(3)), *(f"n{i}" for i in range(3))]
    assert [s["subject"] for s in seen] == subjects
    assert [s["pid"] for s in seen][1:] == [taker.proc.pid] * 6
    assert len(after) == 3


async def test_delete_while_the_sidecar_is_mid_batch_fences_it(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with mailrun_up(tmp_path) as up:
        sink = await up.deploy("sink", pid_recorder())
        dep = await up.deploy("victim", pid_recorder(gate, sink=sink["address"]))
        # Moved to a process up does not supervise, so that what ends it is
        # the fence, not up stopping the sidecar of a deleted deployment.
        gate.touch()
        warm = (await up.send(dep["address"], "warm")).json()
        run_id = warm["run_id"]
        await seen_pids(up, run_id, 1)
        alone = copy_home(up, dep["id"], tmp_path / "alone")
        async with standalone(up, alone, dep["id"], "--takeover") as car:
            await wait_for(lambda: up.find("sidecar", dep["id"]) is None, what="up's to stop")
            gate.unlink()
            for i in range(4):
                assert (await up.send(dep["address"], f"m{i}")).status_code == 202

            async def delivered() -> bool:
                rows = up.query(
                    "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ? AND seq > 1",
                    dep["id"],
                )
                return [s for (s,) in rows] == ["delivered"] * 4

            await wait_for(delivered, what="the batch delivered, its handler held")
            events_before = up.query(
                "SELECT COUNT(*) FROM run_event WHERE deployment_id = ?", dep["id"]
            )
            deleted = await up.http.delete(f"/workflows/deployments/{dep['id']}")
            assert deleted.status_code == 200 and deleted.json()["status"] == "deleted"
            gate.touch()  # the handler finishes the batch after the delete
            assert await car.exit_code() == SidecarExit.DELETED
        assert "was deleted" in car.log.read_text()
        # Nothing it did after the delete was applied, and its mail went nowhere.
        events_after = up.query("SELECT COUNT(*) FROM run_event WHERE deployment_id = ?", dep["id"])
        assert events_after == events_before
        run = await up.run(run_id)
        assert run["status"] == "cancelled" and run["state"]["count"] == 1
        sink_mail = up.query(
            "SELECT subject FROM workflow_run_dispatch WHERE deployment_id = ?", sink["id"]
        )
        assert sink_mail == [("echo warm",)]
