"""``ctx.step`` across real processes: a sidecar that dies right after a
step's record is durable, before its item commits, does not call the step
again when the item is processed again: restarted by `mailrun up` on its
own disk, or on a fresh disk that took the deployment over (the hub's
records, ``RunSnapshot.steps``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_for

from ..harness import Up, mailrun_up
from ..hubs.test_ownership import gone, standalone

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# The step appends a line to the file the mail's body names: an effect
# outside the process, which must happen once.
CHARGING = """
import os


def charge(path):
    with open(path, "a") as f:
        f.write(f"charged by {os.getpid()}\\n")
    return {"receipt": os.path.basename(path), "by": os.getpid()}


async def main(ctx, item):
    ctx.state["charge"] = await ctx.step("charge", charge, item.text.strip())
"""


def step_events(up: Up, run_id: str) -> list[tuple[str]]:
    return up.query("SELECT kind FROM run_event WHERE run_id = ? AND kind = 'StepRecorded'", run_id)


async def charged(up: Up, run_id: str) -> Any:
    return await up.wait_state(
        run_id, lambda r: "charge" in r["state"], timeout=60, what="the item committed"
    )


async def test_a_crash_after_a_steps_record_does_not_call_it_again_after_the_restart(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    crash = {"MAILRUN_FAILPOINTS": "sidecar.step.recorded=crash"}
    async with mailrun_up(tmp_path, env=crash) as up:
        dep = await up.deploy("charges", CHARGING)
        first = await up.sidecar_pid(dep["id"])
        receipt = (await up.send(dep["address"], "order", body=str(ledger))).json()
        run = await charged(up, receipt["run_id"])
        # It did die there, and `up` started it again.
        assert first != await up.sidecar_pid(dep["id"])
    lines = ledger.read_text().splitlines()
    assert lines == [f"charged by {first}"]
    assert run["state"]["charge"] == {"receipt": "ledger", "by": first}
    assert run["status"] == "running"


async def test_a_takeover_on_a_fresh_disk_gets_the_steps_from_the_hub(tmp_path: Path) -> None:
    ledger, pause = tmp_path / "ledger", tmp_path / "go-on"
    stuck = {"MAILRUN_FAILPOINTS": f"sidecar.step.recorded=pause({pause})"}
    async with mailrun_up(tmp_path, env=stuck) as up:
        dep = await up.deploy("charges", CHARGING)
        old_pid = await up.sidecar_pid(dep["id"])
        receipt = (await up.send(dep["address"], "order", body=str(ledger))).json()
        run_id = receipt["run_id"]
        reached = pause.with_name(pause.name + ".reached")
        await wait_for(reached.exists, timeout=30, what="the step recorded")
        await wait_for(lambda: step_events(up, run_id), timeout=30, what="the record shipped")
        # The owner's identity, none of its inbox: the new owner knows the
        # step only from the hub.
        home = tmp_path / "fresh"
        shutil.copytree(up.state_dir / "sidecars" / dep["id"], home)
        for inbox in home.rglob("inbox.db*"):
            inbox.unlink()
        assert not list(home.rglob("inbox.db"))
        async with standalone(up, home, dep["id"], "--takeover") as taker:
            await wait_for(lambda: gone(old_pid), timeout=30, what="the old owner fenced")
            run = await charged(up, run_id)
            assert taker.proc.poll() is None
        pause.touch()
    assert ledger.read_text().splitlines() == [f"charged by {old_pid}"]
    assert run["state"]["charge"] == {"receipt": "ledger", "by": old_pid}
    assert step_events(up, run_id) == [("StepRecorded",)]
