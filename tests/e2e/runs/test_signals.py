"""Signals and approval decisions end to end: `mailrun up` (nats-server, hub
and sidecar as OS processes), the HTTP API and the CLI, and a workflow that
records every item it is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import wait_for

from ..harness import MAILRUN, Up, mailrun_up

pytestmark = pytest.mark.anyio

# Records what the handler sees of each item.
RECORDER = """
async def main(ctx, item):
    seen = ctx.state.setdefault("seen", [])
    entry = {"kind": item.kind, "dispatch_id": item.dispatch_id, "subject": item.subject}
    if item.kind == "signal":
        entry.update(name=item.name, payload=item.payload)
    elif item.kind == "approval":
        entry.update(approval_id=item.approval_id, decision=item.decision)
    seen.append(entry)
    if item.kind == "mail" and item.subject == "ask":
        ctx.state["asked"] = await ctx.request_approval("ship order 7?")
    if item.kind == "mail" and item.subject == "stop":
        ctx.complete({"count": len(seen)})
"""


async def mail(up: Up, subject: str) -> dict[str, Any]:
    r = await up.send("flow@mailrun.local", subject)
    assert r.status_code == 202, r.text
    return dict(r.json())


async def signal(up: Up, run_id: str, **body: Any) -> dict[str, Any]:
    r = await up.http.post(f"/runs/{run_id}/signals", json=body)
    assert r.status_code == 202, r.text
    return dict(r.json())


async def cli(up: Up, *args: str) -> Any:
    """Run `mailrun ARGS --json` against this hub; its JSON answer."""
    done = await anyio.run_process([MAILRUN, *args, "--json", *up.hub_options], check=False)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


async def test_signals_arrive_once_and_in_seq_order_with_mail(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        await up.deploy("flow", RECORDER)
        first = await mail(up, "m1")
        run_id = first["run_id"]
        restock = await signal(
            up, run_id, name="restock", payload={"sku": "a-1", "qty": 3}, message_id="sig-1"
        )
        # The same signal again, through the CLI: the first receipt, nothing new.
        again = await cli(
            up, "signal", run_id, "restock", "--payload", '{"qty": 3, "sku": "a-1"}',
            "--message-id", "sig-1",
        )  # fmt: skip
        assert again == {**restock, "duplicate": True}
        second = await mail(up, "m2")
        pause = await signal(up, run_id, name="pause", payload=[1, "two", None])
        third = await mail(up, "m3")
        receipts = [first, restock, second, pause, third]
        assert [r["seq"] for r in receipts] == [1, 2, 3, 4, 5]
        assert {r["run_id"] for r in receipts} == {run_id}

        run = await up.wait_state(run_id, lambda r: len(r["state"].get("seen", [])) >= 5)
        seen = run["state"]["seen"]
        assert [s["dispatch_id"] for s in seen] == [r["dispatch_id"] for r in receipts]
        assert [(s["kind"], s["subject"]) for s in seen] == [
            ("mail", "m1"),
            ("signal", "restock"),
            ("mail", "m2"),
            ("signal", "pause"),
            ("mail", "m3"),
        ]
        assert (seen[1]["name"], seen[1]["payload"]) == ("restock", {"sku": "a-1", "qty": 3})
        assert (seen[3]["name"], seen[3]["payload"]) == ("pause", [1, "two", None])

        async def processed() -> bool:
            r = await up.http.get(f"/dispatches/{restock['dispatch_id']}")
            return r.status_code == 200 and r.json()["status"] == "processed"

        await wait_for(processed, what="the signal's dispatch processed")
        # Still once, after the retry was answered and everything was processed.
        rows = up.query(
            "SELECT kind, COUNT(*) FROM workflow_run_dispatch WHERE run_id = ? GROUP BY kind",
            run_id,
        )
        assert sorted(rows) == [("mail", 3), ("signal", 2)]

        await mail(up, "stop")
        run = await up.wait_state(run_id, lambda r: r["status"] == "completed")
        assert run["result"] == {"count": 6}  # the five, and the stop: the retry never arrived
        r = await up.http.post(f"/runs/{run_id}/signals", json={"name": "late"})
        assert r.status_code == 409 and r.json()["reason"] == "workflow_run_terminal"


async def test_an_approval_is_listed_decided_and_given_to_its_run(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        await up.deploy("flow", RECORDER)
        run_id = (await mail(up, "ask"))["run_id"]
        run = await up.wait_state(run_id, lambda r: "asked" in r["state"])
        approval_id = run["state"]["asked"]

        async def listed() -> list[Any] | None:
            r = await up.http.get("/approvals", params={"run": run_id, "status": "pending"})
            assert r.status_code == 200, r.text
            return r.json()["approvals"] or None

        (approval,) = await wait_for(listed, what="the approval listed")
        assert (approval["id"], approval["prompt"], approval["status"]) == (
            approval_id,
            "ship order 7?",
            "pending",
        )
        assert (await cli(up, "approvals", "--run", run_id))["approvals"][0]["id"] == approval_id

        receipt = await cli(up, "approve", approval_id, "--reject")
        assert receipt["status"] == "accepted" and receipt["run_id"] == run_id
        run = await up.wait_state(run_id, lambda r: len(r["state"]["seen"]) == 2)
        decision = run["state"]["seen"][1]
        assert decision == {
            "kind": "approval", "dispatch_id": receipt["dispatch_id"], "subject": "reject",
            "approval_id": approval_id, "decision": "reject",
        }  # fmt: skip
        decided = (await up.http.get(f"/approvals/{approval_id}")).json()
        assert (decided["status"], decided["decision"]) == ("decided", "reject")
        r = await up.http.post(f"/approvals/{approval_id}", json={"decision": "approve"})
        assert r.status_code == 409 and r.json()["reason"] == "approval_decided"
