"""Approvals over HTTP against a real store: listing, reading one, deciding.

An approval row is what the hub's ingestion of an ApprovalRequested event
writes (``requested`` below writes the same row); a run ends the way the
ingestion of RunCompleted leaves it (its status)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support.store import execute, read_one, rows

from ..harness import Api, api, assert_error

pytestmark = pytest.mark.anyio


async def requested(hub: Api, approval_id: str, run_id: str, prompt: str, at: float) -> None:
    await execute(
        hub.store,
        "INSERT INTO approval (id, run_id, prompt, status, created_at)"
        " VALUES (?, ?, ?, 'pending', ?)",
        approval_id,
        run_id,
        prompt,
        at,
    )


async def end_run(hub: Api, run_id: str, status: str = "completed") -> None:
    await execute(hub.store, "UPDATE workflow_run SET status = ? WHERE id = ?", status, run_id)


async def first_run(hub: Api, name: str) -> tuple[str, str]:
    """Deploy ``name`` and mail it: its deployment id and top-level run id."""
    dep = await hub.deploy(name)
    r = await hub.send(f"{name}@mailrun.local")
    assert r.status_code == 202, r.text
    return dep["id"], r.json()["run_id"]


async def listed(hub: Api, **params: Any) -> list[str]:
    r = await hub.client.get("/approvals", params=params)
    assert r.status_code == 200, r.text
    assert list(r.json()) == ["approvals"]
    return [a["id"] for a in r.json()["approvals"]]


async def test_approvals_are_listed_by_run_deployment_and_status(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        assert await listed(hub) == []
        dep_a, run_a = await first_run(hub, "alpha")
        dep_b, run_b = await first_run(hub, "beta")
        assert dep_b != dep_a
        await requested(hub, "apr_1", run_a, "ship it?", 10.0)
        await requested(hub, "apr_2", run_a, "and this?", 20.0)
        await requested(hub, "apr_3", run_b, "beta too?", 30.0)

        r = await hub.client.get("/approvals")
        first = r.json()["approvals"][0]
        assert first == {
            "id": "apr_1", "run_id": run_a, "deployment_id": dep_a, "prompt": "ship it?",
            "status": "pending", "decision": None, "created_at": 10.0, "decided_at": None,
            "run_status": "running", "expires_at": None,
        }  # fmt: skip
        assert await listed(hub) == ["apr_1", "apr_2", "apr_3"]  # oldest first
        assert await listed(hub, run=run_a) == ["apr_1", "apr_2"]
        assert await listed(hub, deployment="beta") == ["apr_3"]
        assert await listed(hub, deployment=dep_a) == ["apr_1", "apr_2"]
        assert await listed(hub, limit=2) == ["apr_2", "apr_3"]  # the latest two
        assert await listed(hub, run=run_b, deployment="alpha") == []

        r = await hub.client.post("/approvals/apr_2", json={"decision": "reject"})
        assert r.status_code == 202, r.text
        assert await listed(hub, status="pending") == ["apr_1", "apr_3"]
        assert await listed(hub, status="decided") == ["apr_2"]
        assert await listed(hub, status="pending", run=run_a) == ["apr_1"]
        one = (await hub.client.get("/approvals/apr_2")).json()
        assert (one["status"], one["decision"], one["deployment_id"]) == (
            "decided",
            "reject",
            dep_a,
        )
        assert isinstance(one["decided_at"], float) and one["decided_at"] >= 20.0

        for params, code, reason in [
            ({"status": "maybe"}, 422, "invalid_request"),
            ({"limit": "0"}, 422, "invalid_request"),
            ({"limit": "1001"}, 422, "invalid_request"),
            ({"limit": "ten"}, 422, "invalid_request"),
            ({"run": "run_" + "0" * 26}, 404, "unknown_run"),
            ({"run": dep_a}, 404, "unknown_run"),  # an anchor row is no run
            ({"deployment": "gamma"}, 404, "unknown_deployment"),
        ]:
            assert_error(await hub.client.get("/approvals", params=params), code, reason)
        assert_error(await hub.client.get("/approvals/apr_missing"), 404, "unknown_approval")


async def test_a_decision_is_approve_or_reject_and_decides_once(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep_id, run_id = await first_run(hub, "flow")
        r = await hub.client.post("/approvals/apr_missing", json={"decision": "approve"})
        assert_error(r, 404, "unknown_approval")
        await requested(hub, "apr_1", run_id, "ship it?", 1.0)
        for body in [{}, {"decision": "yes"}, {"decision": "Approve"}, {"decision": ""},
                     {"decision": None}, {"decision": "approve\n"}]:  # fmt: skip
            assert_error(
                await hub.client.post("/approvals/apr_1", json=body), 422, "invalid_request"
            )

        r = await hub.client.post("/approvals/apr_1", json={"decision": "approve"})
        assert r.status_code == 202, r.text
        receipt = r.json()
        assert receipt == {
            "status": "accepted", "dispatch_id": receipt["dispatch_id"], "run_id": run_id,
            "deployment_id": dep_id, "seq": 2, "duplicate": False,
        }  # fmt: skip
        retry = await hub.client.post("/approvals/apr_1", json={"decision": "approve"})
        assert retry.status_code == 202 and retry.json() == {**receipt, "duplicate": True}
        other = await hub.client.post("/approvals/apr_1", json={"decision": "reject"})
        assert_error(other, 409, "approval_decided")

        decided = await rows(hub.store, "SELECT status, decision FROM approval WHERE id = 'apr_1'")
        assert decided == [("decided", "approve")]
        dsp = (await hub.client.get(f"/dispatches/{receipt['dispatch_id']}")).json()
        assert (dsp["kind"], dsp["subject"], dsp["run_id"]) == ("approval", "approve", run_id)
        row = await read_one(
            hub.store, "SELECT body FROM workflow_run_dispatch WHERE id = ?", receipt["dispatch_id"]
        )
        assert row is not None
        # The body the sidecar reads into ApprovalDecision (docs/sidecar.md, "Items").
        assert msgspec.json.decode(row[0]) == {"approval_id": "apr_1", "decision": "approve"}
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 2


@pytest.mark.parametrize("ended", ["completed", "failed", "cancelled"])
async def test_a_decision_for_a_run_that_ended_is_refused_and_stays_pending(
    tmp_path: Path, ended: str
) -> None:
    async with api(tmp_path) as hub:
        _, run_id = await first_run(hub, "flow")
        await requested(hub, "apr_1", run_id, "ship it?", 1.0)
        await end_run(hub, run_id, ended)
        for decision in ("approve", "reject", "approve"):
            r = await hub.client.post("/approvals/apr_1", json={"decision": decision})
            assert_error(r, 409, "workflow_run_terminal")
        one = (await hub.client.get("/approvals/apr_1")).json()
        assert (one["status"], one["decision"], one["decided_at"], one["run_status"]) == (
            "pending",
            None,
            None,
            ended,
        )
        assert await listed(hub, status="pending") == ["apr_1"]
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 1  # the mail


async def test_a_decision_after_its_deployment_was_deleted_is_refused(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        _, run_id = await first_run(hub, "flow")
        await requested(hub, "apr_1", run_id, "ship it?", 1.0)
        assert (await hub.client.delete("/workflows/deployments/flow")).status_code == 200
        r = await hub.client.post("/approvals/apr_1", json={"decision": "approve"})
        assert_error(r, 409, "deployment_not_live")
        assert (await hub.client.get("/approvals/apr_1")).json()["status"] == "pending"
