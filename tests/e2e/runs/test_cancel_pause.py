"""Cancel and pause under `mailrun up`: a run cancelled while it runs,
while it waits on an approval, while it is suspended, and a parent with a
live child; with and without terminate, each once however often it is
asked. A paused deployment takes mail and keeps it, through a hub restart,
and delivers it all, in order and once, when it is unpaused."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support import wait_for

from ..harness import Up, mailrun, mailrun_up, restarted_hub, run_status, send_accepted

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FLOW = """
async def main(ctx, item):
    ctx.state.setdefault("seen", []).append(f"{item.kind}:{item.subject}")
    if item.subject == "ask":
        await ctx.request_approval("go on?")
    if item.subject == "boom":
        raise RuntimeError("boom is poison")
    if item.subject == "spawn":
        ctx.state["child"] = await ctx.spawn("flow:child", None)
    if item.kind == "cancel":
        ctx.state["reason"] = item.reason
        ctx.complete("finished anyway")


async def child(ctx, item):
    ctx.state.setdefault("seen", []).append(item.kind)
"""


def dispatches(up: Up, run_id: str) -> list[tuple[str, str, str]]:
    return [
        (str(kind), str(subject), str(state))
        for kind, subject, state in up.query(
            "SELECT kind, subject, status FROM workflow_run_dispatch WHERE run_id = ? ORDER BY seq",
            run_id,
        )
    ]


async def settled(up: Up, run_id: str, expected: list[tuple[str, str, str]]) -> None:
    await wait_for(
        lambda: dispatches(up, run_id) == expected, timeout=60, what=f"dispatches {expected}"
    )


async def test_a_running_run_cancelled_sees_the_cancel_and_ends_cancelled_once(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("cancels", FLOW)
        run_id = (await send_accepted(up, dep["address"], "m0"))["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("seen") == ["mail:m0"])
        code, out = await mailrun(up, "cancel", run_id, "--reason", "customer left", "--json")
        assert code == 0, out
        run = await run_status(up, run_id, "cancelled")
        # The handler saw it (and called complete: cancelled wins).
        assert run["state"] == {"seen": ["mail:m0", "cancel:customer left"],
                                "reason": "customer left"}  # fmt: skip
        assert (run["error"], run["result"]) == ("customer left", None)
        again = await up.http.post(f"/runs/{run_id}/cancel", json={"reason": "twice"})
        assert again.status_code == 202 and again.json()["duplicate"] is True
        late = await up.send(dep["address"], "late")
        assert (late.status_code, late.json()["reason"]) == (409, "workflow_run_terminal")
        await settled(up, run_id, [("mail", "m0", "processed"),
                                   ("cancel", "customer left", "processed")])  # fmt: skip


async def test_a_waiting_run_cancelled_overtakes_what_it_holds_which_is_then_refused(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("waits", FLOW)
        run_id = (await send_accepted(up, dep["address"], "ask"))["run_id"]
        await run_status(up, run_id, "waiting")
        await send_accepted(up, dep["address"], "held")
        answer = await up.http.post(f"/runs/{run_id}/cancel", json={"reason": "no need"})
        assert answer.status_code == 202, answer.text
        run = await run_status(up, run_id, "cancelled")
        assert run["state"]["seen"] == ["mail:ask", "cancel:no need"]
        await settled(up, run_id, [("mail", "ask", "processed"), ("mail", "held", "cancelled"),
                                   ("cancel", "no need", "processed")])  # fmt: skip


async def test_a_suspended_run_terminated_ends_at_once_unseen_by_its_handler(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("suspends", FLOW, max_attempts=2, max_backoff=0.2)
        run_id = (await send_accepted(up, dep["address"], "boom"))["run_id"]
        await run_status(up, run_id, "suspended")
        await send_accepted(up, dep["address"], "held")
        code, out = await mailrun(up, "cancel", run_id, "--terminate", "--reason", "stop it")
        assert code == 0, out
        # Ended at the hub in the cancel's own transaction: no wait.
        run = await up.run(run_id)
        assert (run["status"], run["error"]) == ("cancelled", "stop it")
        late = await up.send(dep["address"], "late")
        assert (late.status_code, late.json()["reason"]) == (409, "workflow_run_terminal")
        await settled(up, run_id, [("mail", "boom", "cancelled"), ("mail", "held", "cancelled"),
                                   ("cancel", "stop it", "processed")])  # fmt: skip
        # The handler never saw the cancel nor what the run held.
        assert "cancel:stop it" not in (await up.run(run_id))["state"].get("seen", [])
        assert (await up.run(run_id))["status"] == "cancelled"


async def test_a_parent_cancelled_cancels_its_live_child(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("parent", FLOW)
        parent_id = (await send_accepted(up, dep["address"], "spawn"))["run_id"]
        parent = await up.wait_state(parent_id, lambda r: "child" in r["state"])
        child_id = parent["state"]["child"]
        await up.wait_state(child_id, lambda r: r["state"].get("seen") == ["start"])
        answer = await up.http.post(f"/runs/{parent_id}/cancel", json={"reason": "all off"})
        assert answer.status_code == 202, answer.text
        await run_status(up, parent_id, "cancelled")
        child = await run_status(up, child_id, "cancelled")
        assert child["error"] == "parent run ended"
        signal_answer = await up.http.post(f"/runs/{child_id}/signals", json={"name": "late"})
        assert signal_answer.status_code == 409


async def test_a_paused_deployment_keeps_its_mail_through_a_hub_restart_and_delivers_it_once(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("pauses", FLOW)
        other = await up.deploy("other", FLOW)
        run_id = (await send_accepted(up, dep["address"], "m0"))["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("seen") == ["mail:m0"])
        code, out = await mailrun(up, "pause", "pauses")
        assert code == 0 and "paused" in out, out
        for subject in ("m1", "m2"):
            assert (await send_accepted(up, dep["address"], subject))["run_id"] == run_id

        async def proves_delivery_goes_on(subject: str, held: list[str]) -> None:
            """Mail to the other deployment is processed meanwhile: the
            dispatcher works, and keeps the paused one's on purpose."""
            other_run = (await send_accepted(up, other["address"], subject))["run_id"]
            await up.wait_state(
                other_run, lambda r: f"mail:{subject}" in r["state"].get("seen", []), timeout=30
            )
            assert dispatches(up, run_id)[1:] == [("mail", s, "reserved") for s in held]
            assert (await up.run(run_id))["state"]["seen"] == ["mail:m0"]

        await proves_delivery_goes_on("o1", ["m1", "m2"])
        code, out = await mailrun(up, "deployments")
        assert code == 0 and "paused" in out, out
        health = await up.healthz()
        assert health is not None and (health["status"], health["paused_deployments"]) == ("ok", 1)

        boot_before = health["boot_id"]
        os.kill(await up.hub_pid(), signal.SIGKILL)

        await restarted_hub(up, boot_before)
        shown = (await up.http.get("/workflows/deployments/pauses")).json()
        assert shown["status"] == "paused" and shown["paused_at"] is not None
        await send_accepted(up, dep["address"], "m3")
        await proves_delivery_goes_on("o2", ["m1", "m2", "m3"])

        code, out = await mailrun(up, "unpause", "pauses")
        assert code == 0, out
        everything = ["mail:m0", "mail:m1", "mail:m2", "mail:m3"]
        run = await up.wait_state(run_id, lambda r: r["state"].get("seen") == everything)
        await settled(up, run_id, [("mail", s, "processed") for s in ("m0", "m1", "m2", "m3")])
        assert (await up.run(run_id))["state"]["seen"] == everything  # each once
        assert (await up.http.get("/workflows/deployments/pauses")).json()["status"] == "deployed"
        del run
