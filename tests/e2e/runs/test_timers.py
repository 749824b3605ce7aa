"""Timers end to end: real `mailrun up` (hub, sidecars, nats-server).

A run's timer fires once, as a ``timer`` item with its name, payload, due
and fire times, within a second of due on an idle hub; one in the past fires
at once; a cancelled one never fires, a moved one fires once at its new
time, and an ended run's are dropped. A timer set before the hub and the
sidecar are both SIGKILLed fires once after they are back. An approval asked
with a timeout is decided ``timeout``, after which a decision is refused;
one decided in time loses its expiry.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from ..harness import Up, mailrun_up, restarted_hub, run_status

pytestmark = pytest.mark.anyio

TIMERS = """
import json
import time


async def main(ctx, item):
    seen = ctx.state.setdefault("seen", [])
    if item.kind == "timer":
        seen.append({"name": item.name, "payload": item.payload, "due_at": item.due_at,
                     "fired_at": item.fired_at, "dispatch_id": item.dispatch_id})
        return
    if item.kind == "approval":
        ctx.state.setdefault("decisions", []).append([item.approval_id, item.decision])
        return
    due = ctx.state.setdefault("due", {})
    for op, *args in json.loads(item.text):
        if op == "set":
            due[args[0]] = ctx.set_timer(args[0], after=args[1], payload=args[2])
        elif op == "past":
            due[args[0]] = ctx.set_timer(args[0], at=time.time() - 10)
        elif op == "cancel":
            ctx.cancel_timer(args[0])
        elif op == "ask":
            approval = await ctx.request_approval("ok?", timeout=args[0])
            ctx.state.setdefault("asked", []).append(approval)
        elif op == "end":
            ctx.complete("ended")
    ctx.state["ops"] = ctx.state.get("ops", 0) + 1
"""


async def _ops(up: Up, address: str, ops: list[list[Any]], count: int) -> Any:
    """Mail ``ops`` to the deployment's run; the run once it has done ``count`` mails."""
    body = json.dumps(ops)
    receipt = (await up.send(address, f"ops {count}", body)).json()
    assert receipt["status"] == "accepted", receipt
    return await up.wait_state(
        receipt["run_id"], lambda r: r["state"].get("ops") == count, what=f"{count} mails done"
    )


def _names(run: Any) -> list[str]:
    return [s["name"] for s in run["state"].get("seen", [])]


async def test_timers_fire_once_on_time_cancelled_never_moved_at_the_new_time(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("timers", TIMERS)
        ops = [["past", "p"], ["set", "a", 1.0, {"k": 1}], ["set", "c", 3, None],
               ["set", "m", 3, "first"], ["set", "last", 4.5, None]]  # fmt: skip
        run = await _ops(up, dep["address"], ops, 1)
        run_id = run["id"]
        run = await _ops(up, dep["address"], [["cancel", "c"], ["set", "m", 3.5, "moved"]], 2)
        pending = {t["name"]: t for t in run["timers"]}
        assert "c" not in pending and pending["m"]["payload"] == "moved"
        assert pending["m"]["due_at"] == run["state"]["due"]["m"]
        assert pending["last"]["due_at"] == run["state"]["due"]["last"]

        run = await up.wait_state(
            run_id, lambda r: "last" in _names(r), timeout=40, what="the last timer"
        )
        # c never fired (its due time is long past by the time "last" fired).
        assert _names(run) == ["p", "a", "m", "last"]
        due = run["state"]["due"]
        fired = {s["name"]: s for s in run["state"]["seen"]}
        for name in ("a", "m", "last"):
            assert fired[name]["due_at"] == due[name]
            assert 0 <= fired[name]["fired_at"] - due[name] < 1.0, fired[name]
        assert (fired["a"]["payload"], fired["m"]["payload"]) == ({"k": 1}, "moved")
        assert fired["p"]["fired_at"] - fired["p"]["due_at"] >= 10
        rows = up.query(
            "SELECT subject, status FROM workflow_run_dispatch WHERE run_id = ? AND kind = 'timer'"
            " ORDER BY seq",
            run_id,
        )
        assert rows == [("p", "processed"), ("a", "processed"), ("m", "processed"),
                        ("last", "processed")]  # fmt: skip
        assert up.query("SELECT COUNT(*) FROM timer WHERE run_id = ?", run_id) == [(0,)]
        assert (await up.run(run_id))["timers"] == []
        metrics = (await up.http.get("/metrics")).text
        assert "mailrun_timers_fired_total 4" in metrics
        assert 'mailrun_timers_pending{kind="timer"} 0' in metrics

        # A run that ends drops its timers: none of them is left to fire.
        ender = await up.deploy("ender", TIMERS)
        receipt = (await up.send(ender["address"], "x", json.dumps([["set", "z", 1, None],
                                                                     ["end"]]))).json()  # fmt: skip
        await run_status(up, receipt["run_id"], "completed")
        assert up.query("SELECT COUNT(*) FROM timer WHERE run_id = ?", receipt["run_id"]) == [(0,)]


async def test_a_timer_set_before_hub_and_sidecar_are_killed_fires_once(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("survivor", TIMERS)
        # x due while both are down (a restart takes a second or two), y
        # about when they are back: each fires once, whichever side it lands.
        run = await _ops(up, dep["address"], [["set", "x", 2, 1], ["set", "y", 4, 2]], 1)
        run_id = run["id"]
        assert up.query("SELECT name FROM timer WHERE run_id = ? ORDER BY due_at", run_id) == [
            ("x",),
            ("y",),
        ]
        before = (await up.healthz())["boot_id"]
        sidecar = await up.sidecar_pid(dep["id"])
        os.kill(sidecar, signal.SIGKILL)
        os.kill(await up.hub_pid(), signal.SIGKILL)

        await restarted_hub(up, before)
        run = await up.wait_state(
            run_id, lambda r: "y" in _names(r), timeout=60, what="both timers after the restart"
        )
        assert await up.sidecar_pid(dep["id"]) != sidecar
        assert _names(run) == ["x", "y"]
        assert [s["payload"] for s in run["state"]["seen"]] == [1, 2]
        rows = up.query(
            "SELECT subject, status FROM workflow_run_dispatch WHERE run_id = ? AND kind = 'timer'"
            " ORDER BY seq",
            run_id,
        )
        assert rows == [("x", "processed"), ("y", "processed")]


async def test_an_approval_times_out_and_one_decided_in_time_does_not(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("gate", TIMERS)
        receipt = (await up.send(dep["address"], "ask", json.dumps([["ask", 1]]))).json()
        run_id = receipt["run_id"]
        run = await up.wait_state(
            run_id, lambda r: r["state"].get("decisions"), timeout=30, what="the timeout"
        )
        (approval_id,) = run["state"]["asked"]
        assert run["state"]["decisions"] == [[approval_id, "timeout"]]
        view = (await up.http.get(f"/approvals/{approval_id}")).json()
        assert (view["status"], view["decision"]) == ("decided", "timeout")
        assert view["expires_at"] is not None
        late = await up.http.post(f"/approvals/{approval_id}", json={"decision": "approve"})
        assert late.status_code == 409 and late.json()["reason"] == "approval_decided", late.text

        # Decided in time: its expiry goes with the decision, nothing times out.
        await up.send(dep["address"], "ask again", json.dumps([["ask", 3600]]))
        run = await up.wait_state(
            run_id, lambda r: len(r["state"].get("asked", [])) == 2, what="the second ask"
        )
        second = run["state"]["asked"][1]
        assert up.query("SELECT kind, name FROM timer") == [("approval", second)]
        answer = await up.http.post(f"/approvals/{second}", json={"decision": "approve"})
        assert answer.status_code == 202, answer.text
        run = await up.wait_state(
            run_id, lambda r: len(r["state"]["decisions"]) == 2, what="the decision"
        )
        assert run["state"]["decisions"][1] == [second, "approve"]
        assert up.query("SELECT COUNT(*) FROM timer") == [(0,)]
