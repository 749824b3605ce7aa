"""Cancel and pause over HTTP, on a real SQLite store: a cancel mints one
``cancel`` item through the accept path (idempotent, refused for an ended
or unknown run, with a typed reason for a bad body); a terminate ends the
run and its live children at once; a pause keeps what a deployment takes
undelivered (not loaded, not counted as waiting, not overdue) until it is
unpaused; ``max_concurrent_runs`` is set, changed, shown and told."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hub.store import (
    count_reserved,
    find_overdue,
    load_reserved,
    read_policy,
)
from tests.hub.api.harness import Api, api, assert_error
from tests.support.store import read_all, statement

pytestmark = pytest.mark.anyio


async def mail(a: Api, dep: dict[str, Any], text: str = "m") -> dict[str, Any]:
    r = await a.send(dep["address"], text=text)
    assert r.status_code == 202, r.text
    return dict(r.json())


async def dispatches(a: Api, run_id: str) -> list[tuple[str, int, str, str, bytes]]:
    rows = await read_all(
        a.store,
        "SELECT kind, seq, message_id, subject, body FROM workflow_run_dispatch"
        " WHERE run_id = ? ORDER BY seq",
        run_id,
    )
    return [(r[0], r[1], r[2], r[3], bytes(r[4] or b"")) for r in rows]


async def test_a_cancel_mints_one_cancel_item_and_a_second_cancel_gets_its_receipt(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        first = await mail(a, dep)
        run_id = first["run_id"]
        r = await a.client.post(f"/runs/{run_id}/cancel", json={"reason": "customer left"})
        assert r.status_code == 202, r.text
        receipt = r.json()
        assert (receipt["status"], receipt["run_id"], receipt["seq"]) == ("accepted", run_id, 2)
        rows = await dispatches(a, run_id)
        assert rows[1][:4] == ("cancel", 2, f"cancel:{run_id}", "customer left")
        assert msgspec.json.decode(rows[1][4]) == {"reason": "customer left", "terminate": False}
        # Not ended at the hub: its sidecar ends it once the item is processed.
        assert (await a.client.get(f"/runs/{run_id}")).json()["status"] == "running"
        # Idempotent, whatever the second one says: the first receipt, nothing new.
        for again in ({"reason": "other"}, {"terminate": True}, None):
            r = await a.client.post(f"/runs/{run_id}/cancel", json=again)
            assert r.status_code == 202, r.text
            assert r.json()["dispatch_id"] == receipt["dispatch_id"]
            assert r.json()["duplicate"] is True
        assert len(await dispatches(a, run_id)) == 2
        assert (await a.client.get(f"/runs/{run_id}")).json()["status"] == "running"
        # Mail is still accepted (the sidecar refuses what comes after the cancel).
        assert (await mail(a, dep))["seq"] == 3


async def test_a_terminate_ends_the_run_and_its_live_children_at_once(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        first = await mail(a, dep)
        run_id = first["run_id"]
        child, grandchild, done = "run_" + "c" * 26, "run_" + "d" * 26, "run_" + "e" * 26
        for rid, parent, status in (
            (child, run_id, "running"),
            (grandchild, child, "waiting"),
            (done, run_id, "completed"),
        ):
            await a.store.transact(
                lambda tx, rid=rid, parent=parent, status=status: tx.execute(
                    statement(_CHILD), (rid, dep["id"], parent, status, time.time(), time.time())
                )
            )
        r = await a.client.post(
            f"/runs/{run_id}/cancel", json={"reason": "stop", "terminate": True}
        )
        assert r.status_code == 202, r.text
        run = (await a.client.get(f"/runs/{run_id}")).json()
        assert (run["status"], run["error"]) == ("cancelled", "stop")
        rows = await dispatches(a, run_id)
        assert rows[-1][:3] == ("cancel", 2, f"terminate:{run_id}")
        assert msgspec.json.decode(rows[-1][4]) == {"reason": "stop", "terminate": True}
        for rid, status in ((child, "cancelled"), (grandchild, "cancelled"), (done, "completed")):
            assert (await a.client.get(f"/runs/{rid}")).json()["status"] == status, rid
        # Later mail is refused; a cancel again gets the first receipt.
        r = await a.send(dep["address"], text="late")
        assert_error(r, 409, "workflow_run_terminal")
        r = await a.client.post(f"/runs/{run_id}/cancel", json={})
        assert (r.status_code, r.json()["seq"]) == (202, 2)


_CHILD = (
    "INSERT INTO workflow_run (id, deployment_id, parent_run_id, is_anchor, is_top_level,"
    " status, last_seq, created_at, updated_at) VALUES (?, ?, ?, 0, 0, ?, 0, ?, ?)"
)


async def test_a_cancel_of_an_ended_or_unknown_run_or_with_a_bad_body_changes_nothing(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        first = await mail(a, dep)
        run_id = first["run_id"]
        r = await a.client.post("/runs/run_nobody/cancel", json={})
        assert_error(r, 404, "unknown_run")
        for bad, code, reason in (
            (b"{", 400, "malformed_json"),
            (b'{"reason": 5}', 422, "invalid_request"),
            (b'{"terminate": "yes"}', 422, "invalid_request"),
            (b'{"why": "x"}', 422, "invalid_request"),
            (b'{"reason": ""}', 422, "invalid_request"),
            (b'{"reason": "two\\nlines"}', 422, "invalid_request"),
        ):
            r = await a.client.post(
                f"/runs/{run_id}/cancel", content=bad, headers={"content-type": "application/json"}
            )
            assert (r.status_code, r.json()["reason"]) == (code, reason), bad
        assert len(await dispatches(a, run_id)) == 1
        await a.store.transact(
            lambda tx: tx.execute(statement(_FAILED), ("failed", time.time(), run_id))
        )
        r = await a.client.post(f"/runs/{run_id}/cancel", json={"terminate": True})
        assert_error(r, 409, "workflow_run_terminal")
        assert len(await dispatches(a, run_id)) == 1
        # An empty body is a plain cancel with the default reason.
        second = await a.deploy("second")
        other = await mail(a, second)
        r = await a.client.post(f"/runs/{other['run_id']}/cancel")
        assert r.status_code == 202, r.text
        assert (await dispatches(a, other["run_id"]))[-1][3] == "cancelled"


_FAILED = "UPDATE workflow_run SET status = ?, updated_at = ? WHERE id = ?"


async def test_a_paused_deployment_takes_mail_and_keeps_it_undelivered_until_unpaused(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        other = await a.deploy("other")
        r = await a.client.post("/workflows/deployments/flow/pause")
        assert r.status_code == 200, r.text
        view = r.json()
        assert (view["status"], view["id"]) == ("paused", dep["id"])
        paused_at = view["paused_at"]
        assert paused_at is not None
        # Idempotent: still paused since the first.
        r = await a.client.post(f"/workflows/deployments/{dep['id']}/pause")
        assert (r.json()["status"], r.json()["paused_at"]) == ("paused", paused_at)
        receipts = [await mail(a, dep, f"m{i}") for i in range(3)]
        assert [x["seq"] for x in receipts] == [1, 2, 3]
        await mail(a, other)
        load = partial(load_reserved, deployment_id=dep["id"], limit=10)
        assert await a.store.read(load) == []
        assert list(await a.store.read(count_reserved)) == [other["id"]]
        # Delivered before the pause and never processed: not overdue meanwhile.
        await a.store.transact(
            lambda tx: tx.execute(statement(_DELIVERED), (time.time() - 3600, dep["id"]))
        )
        overdue = await a.store.read(partial(find_overdue, window=100, before=time.time()))
        assert [o.deployment_id for o in overdue] == []
        listed = (await a.client.get("/workflows/deployments?status=paused")).json()
        assert [d["id"] for d in listed["deployments"]] == [dep["id"]]
        live = (await a.client.get("/workflows/deployments?status=deployed")).json()
        assert {d["id"] for d in live["deployments"]} == {dep["id"], other["id"]}
        health = (await a.client.get("/healthz")).json()
        assert (health["status"], health["paused_deployments"]) == ("ok", 1)
        text = (await a.client.get("/metrics")).text
        assert f'mailrun_deployment_paused{{deployment="{dep["id"]}"}} 1' in text
        assert f'mailrun_deployment_paused{{deployment="{other["id"]}"}}' not in text

        r = await a.client.post("/workflows/deployments/flow/unpause")
        assert (r.status_code, r.json()["status"], r.json()["paused_at"]) == (
            200, "deployed", None,
        )  # fmt: skip
        r = await a.client.post("/workflows/deployments/flow/unpause")
        assert (r.status_code, r.json()["status"]) == (200, "deployed")
        loaded = await a.store.read(load)
        assert [row.seq for row in loaded or []] == [2, 3]  # seq 1 is out (delivered)
        overdue = await a.store.read(partial(find_overdue, window=100, before=time.time()))
        assert [(o.deployment_id, o.seq) for o in overdue] == [(dep["id"], 1)]
        assert "mailrun_deployment_paused{" not in (await a.client.get("/metrics")).text


_DELIVERED = (
    "UPDATE workflow_run_dispatch SET status = 'delivered', delivered_at = ?"
    " WHERE deployment_id = ? AND seq = 1"
)


async def test_pause_of_an_unknown_or_deleted_deployment_is_refused(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        await a.deploy("flow")
        for verb in ("pause", "unpause"):
            r = await a.client.post(f"/workflows/deployments/nobody/{verb}")
            assert_error(r, 404, "unknown_deployment")
        assert (await a.client.delete("/workflows/deployments/flow")).status_code == 200
        r = await a.client.post("/workflows/deployments/flow/pause")
        assert_error(r, 409, "deployment_not_live")
        assert (await a.client.get("/workflows/deployments/flow")).json()["paused_at"] is None
        r = await a.anonymous.post("/workflows/deployments/flow/pause")
        assert r.status_code == 401


async def test_max_concurrent_runs_is_set_at_create_changed_by_patch_and_told(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        plain = await a.deploy("plain")
        assert plain["max_concurrent_runs"] == 16
        given = await a.deploy("given", source="async def main(c, i): pass\n",
                               max_concurrent_runs=3)  # fmt: skip
        assert given["max_concurrent_runs"] == 3
        told = await a.store.read(partial(read_policy, deployment_id=given["id"]))
        assert told.max_concurrent_runs == 3
        r = await a.client.patch("/workflows/deployments/given", json={"max_concurrent_runs": 1})
        assert (r.status_code, r.json()["max_concurrent_runs"]) == (200, 1)
        for bad in (0, 1025, "4", 2.5):
            r = await a.client.patch(
                "/workflows/deployments/given", json={"max_concurrent_runs": bad}
            )
            assert_error(r, 422, "invalid_policy")
        r = await a.client.post(
            "/workflows/deployments",
            json={"name": "bad", "source": "x = 1\n", "max_concurrent_runs": 2000},
        )
        assert_error(r, 422, "invalid_policy")
        told = await a.store.read(partial(read_policy, deployment_id=given["id"]))
        assert told.max_concurrent_runs == 1


async def test_the_console_shows_a_pause_and_offers_pause_unpause_and_cancel(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        first = await mail(a, dep)
        page = (await a.client.get("/console/deployments/flow")).text
        assert f'data-post="/workflows/deployments/{dep["id"]}/pause"' in page
        assert "paused (" not in page
        await a.client.post("/workflows/deployments/flow/pause")
        page = (await a.client.get("/console/deployments/flow")).text
        assert "paused (not connected)" in page
        assert f'data-post="/workflows/deployments/{dep["id"]}/unpause"' in page
        assert "paused (not connected)" in (await a.client.get("/")).text
        run_page = f"/console/runs/{first['run_id']}"
        assert f'data-post="/runs/{first["run_id"]}/cancel"' in (await a.client.get(run_page)).text
        await a.client.post(f"/runs/{first['run_id']}/cancel", json={"terminate": True})
        assert "/cancel" not in (await a.client.get(run_page)).text
