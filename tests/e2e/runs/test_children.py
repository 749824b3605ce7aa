"""Child runs end to end: real processes, real nats-server.

A parent spawns children; each runs in the parent's sidecar as its own run,
starting with a ``start`` item; when it ends, the parent gets a ``child``
item. Through a SIGKILL of the sidecar between the spawn and the children's
ends, each child runs once and the parent sees each end once.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest

from tests.support import wait_for

from ..harness import mailrun_up

pytestmark = pytest.mark.anyio

FAN_OUT = """
import pathlib

GATE = pathlib.Path({gate!r})


async def main(ctx, item):
    if item.kind == "mail" and item.subject == "fan out":
        ctx.state["children"] = [await ctx.spawn("flow:child", {{"n": n}}) for n in range(3)]
        ctx.state["ends"] = []
    elif item.kind == "child":
        ctx.state["ends"].append([item.child_run_id, item.status, item.result])
        if len(ctx.state["ends"]) == len(ctx.state["children"]):
            ctx.complete(sorted(end[2]["n"] for end in ctx.state["ends"]))


async def child(ctx, item):
    if item.kind == "start":
        ctx.state["input"] = item.input
        return
    # A signal "finish" ends the child, once the test opened the gate.
    if GATE.exists():
        ctx.complete({{"n": ctx.state["input"]["n"] * 10}})
"""

WAITING_CHILD = """
async def main(ctx, item):
    if item.subject == "spawn":
        ctx.state["child"] = await ctx.spawn("flow:child", None)
    if item.subject == "stop":
        ctx.complete("parent done")


async def child(ctx, item):
    ctx.state.setdefault("seen", []).append(item.kind)
"""


async def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_a_parent_fans_out_to_three_children_through_a_sidecar_kill(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("fanout", FAN_OUT.format(gate=str(gate)))
        parent_id = (await up.send(dep["address"], "fan out")).json()["run_id"]
        parent = await up.wait_state(parent_id, lambda r: len(r["state"].get("children", [])) == 3)
        children = parent["state"]["children"]

        def started() -> bool:
            rows = up.query(
                "SELECT status FROM workflow_run WHERE parent_run_id = ? ORDER BY id", parent_id
            )
            return rows == [("running",)] * 3

        await wait_for(started, what="three children started")
        for child_id in children:
            child = await up.run(child_id)
            assert child["parent_run_id"] == parent_id
            assert child["state"]["input"]["n"] in (0, 1, 2)

        old_pid = await up.sidecar_pid(dep["id"])
        os.kill(old_pid, signal.SIGKILL)
        await wait_for(lambda: _gone(old_pid), what="the killed sidecar to be reaped")
        gate.touch()
        for child_id in children:
            r = await up.http.post(f"/runs/{child_id}/signals", json={"name": "finish"})
            assert r.status_code == 202, r.text

        parent = await up.wait_state(parent_id, lambda r: r["status"] == "completed", timeout=30)
        assert parent["result"] == [0, 10, 20]
        ends = parent["state"]["ends"]
        assert sorted(end[0] for end in ends) == sorted(children)  # each end seen once
        assert {end[1] for end in ends} == {"completed"}
        for child_id in children:
            child = await up.run(child_id)
            assert child["status"] == "completed"
            # Each child ran its start once: one start dispatch, processed.
            rows = up.query(
                "SELECT kind, status FROM workflow_run_dispatch WHERE run_id = ? ORDER BY seq",
                child_id,
            )
            assert rows == [("start", "processed"), ("signal", "processed")]
        rows = up.query(
            "SELECT kind, status FROM workflow_run_dispatch WHERE run_id = ? ORDER BY seq",
            parent_id,
        )
        assert rows == [("mail", "processed")] + [("child", "processed")] * 3
        assert await up.sidecar_pid(dep["id"]) != old_pid


async def test_a_parent_that_ends_cancels_its_live_child_and_gets_no_child_item(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("parent", WAITING_CHILD)
        parent_id = (await up.send(dep["address"], "spawn")).json()["run_id"]
        parent = await up.wait_state(parent_id, lambda r: "child" in r["state"])
        child_id = parent["state"]["child"]
        await up.wait_state(child_id, lambda r: r["state"].get("seen") == ["start"])
        assert (await up.send(dep["address"], "stop")).status_code == 202
        await up.wait_state(parent_id, lambda r: r["status"] == "completed")
        child = await up.wait_state(child_id, lambda r: r["status"] == "cancelled")
        assert child["error"] == "parent run ended"
        # The child takes nothing more, and the ended parent got no child item.
        r = await up.http.post(f"/runs/{child_id}/signals", json={"name": "late"})
        assert r.status_code == 409 and r.json()["reason"] == "workflow_run_terminal"
        kinds = up.query("SELECT kind FROM workflow_run_dispatch WHERE run_id = ?", parent_id)
        assert sorted(k for (k,) in kinds) == ["mail", "mail"]
        assert json.loads(up.query("SELECT state FROM workflow_run WHERE id = ?", child_id)[0][0])[
            "seen"
        ] == ["start"]
