"""Approval gates end to end: real processes, real nats-server.

A run that asked for an approval is ``waiting``: the mail that arrives
meanwhile is accepted, delivered to the sidecar and held there; after the
decision the handler sees the decision first, then the held mail in its
order (docs/design.md section 5), also when the hub restarted while the run waited.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support import wait_for

from ..harness import Up, mailrun_up, restarted_hub

pytestmark = pytest.mark.anyio

GATED = """
async def main(ctx, item):
    ctx.state.setdefault("seen", []).append([item.kind, item.subject])
    if item.subject == "gate":
        ctx.state["approval"] = await ctx.request_approval("ship it?")
    if item.subject == "stop":
        ctx.complete(len(ctx.state["seen"]))
"""


async def _restart_hub(up: Up) -> None:
    before = await up.healthz()
    assert before is not None
    os.kill(await up.hub_pid(), signal.SIGKILL)

    await restarted_hub(up, before["boot_id"])


@pytest.mark.parametrize("restart", [False, True], ids=["steady", "hub-restarted"])
async def test_a_gate_holds_mail_until_the_decision_which_comes_first(
    tmp_path: Path, restart: bool
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("gated", GATED)
        address = dep["address"]
        first = (await up.send(address, "gate")).json()
        run_id = first["run_id"]
        run = await up.wait_state(run_id, lambda r: r["status"] == "waiting")
        approval_id = run["state"]["approval"]
        assert approval_id.startswith("apr_")

        held = [(await up.send(address, f"held {i}")).json() for i in (1, 2)]
        assert all(r["status"] == "accepted" and r["run_id"] == run_id for r in held)

        def delivered() -> bool:
            rows = up.query(
                "SELECT status FROM workflow_run_dispatch WHERE id IN (?, ?)",
                *[r["dispatch_id"] for r in held],
            )
            return rows == [("delivered",), ("delivered",)]

        await wait_for(delivered, what="the held mail stored by the sidecar")
        if restart:
            await _restart_hub(up)
        run = await up.run(run_id)
        assert run["status"] == "waiting"
        assert run["state"]["seen"] == [["mail", "gate"]]

        r = await up.http.post(f"/approvals/{approval_id}", json={"decision": "approve"})
        assert r.status_code == 202, r.text
        assert r.json()["run_id"] == run_id
        run = await up.wait_state(run_id, lambda r: len(r["state"]["seen"]) == 4)
        assert run["state"]["seen"] == [
            ["mail", "gate"],
            ["approval", "approve"],
            ["mail", "held 1"],
            ["mail", "held 2"],
        ]
        assert run["status"] == "running"

        # Mail after the decision is processed at once, after the held mail.
        assert (await up.send(address, "stop")).status_code == 202
        run = await up.wait_state(run_id, lambda r: r["status"] == "completed")
        assert run["result"] == 5
        rows = up.query(
            "SELECT status FROM workflow_run_dispatch WHERE run_id = ? ORDER BY seq", run_id
        )
        assert rows == [("processed",)] * 5
        assert up.query("SELECT status FROM approval WHERE id = ?", approval_id) == [("decided",)]
