"""Mail flows end to end through real processes: up, nats-server, hub, sidecar."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import anyio
import httpx
import pytest

from ..harness import MAILRUN, mailrun_up, recorder_source

pytestmark = pytest.mark.anyio


async def test_four_mails_in_order_then_stop_completes_the_run(tmp_path: Path) -> None:
    # On PostgreSQL: tests/e2e/hubs/test_move_to_postgresql.py and test_hubs.py.
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("orders", recorder_source())
        assert dep["status"] == "deployed"
        assert dep["address"] == "orders@mailrun.local"
        receipts = []
        for i in range(4):
            r = await up.send(dep["address"], f"mail {i}", f"body {i}")
            assert r.status_code == 202, r.text
            receipts.append(r.json())
        run_ids = {rc["run_id"] for rc in receipts}
        assert len(run_ids) == 1
        (run_id,) = run_ids
        run = await up.wait_state(run_id, lambda r: r["state"].get("count") == 4)
        seen = run["state"]["seen"]
        assert [s["subject"] for s in seen] == [f"mail {i}" for i in range(4)]
        assert [s["text"] for s in seen] == [f"body {i}" for i in range(4)]
        assert [s["dispatch_id"] for s in seen] == [rc["dispatch_id"] for rc in receipts]
        assert run["status"] == "running"

        r = await up.send(dep["address"], "stop")
        assert r.status_code == 202
        run = await up.wait_state(run_id, lambda r: r["status"] == "completed")
        assert run["result"] == {"count": 5}
        assert run["is_top_level"] in (True, 1)
        assert run["deployment_id"] == dep["id"]

        # The hub's records agree: every dispatch processed, in seq order 1..5.
        rows = up.query(
            "SELECT seq, status FROM workflow_run_dispatch WHERE deployment_id = ? ORDER BY seq",
            dep["id"],
        )
        assert rows == [(i, "processed") for i in range(1, 6)]

        # A trigger to the completed run is refused and creates nothing.
        r = await up.send(dep["address"], "too late")
        assert r.status_code == 409
        assert r.json()["reason"] == "workflow_run_terminal"
        assert r.json()["status"] == "rejected"
        assert up.query("SELECT count(*) FROM workflow_run_dispatch")[0][0] == 5
        assert (
            up.query(
                "SELECT count(*) FROM workflow_run WHERE deployment_id = ? AND is_anchor = 0",
                dep["id"],
            )[0][0]
            == 1
        )


async def test_fifty_concurrent_first_triggers_mint_one_run(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("burst", recorder_source())
        responses: list[httpx.Response] = []

        async def send(i: int) -> None:
            responses.append(await up.send(dep["address"], f"first {i}"))

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(send, i)
        assert [r.status_code for r in responses] == [202] * 50
        assert len({r.json()["run_id"] for r in responses}) == 1
        top = up.query(
            "SELECT id FROM workflow_run WHERE deployment_id = ? AND is_top_level = 1", dep["id"]
        )
        assert len(top) == 1 and top[0][0] == responses[0].json()["run_id"]
        seqs = sorted(r.json()["seq"] for r in responses)
        assert seqs == list(range(1, 51))
        run = await up.wait_state(top[0][0], lambda r: r["state"].get("count") == 50)
        assert len({s["dispatch_id"] for s in run["state"]["seen"]}) == 50


async def test_message_id_makes_a_trigger_idempotent(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("idem", recorder_source())
        first = await up.send(dep["address"], "hello", message_id="<m1@example>")
        again = await up.send(dep["address"], "hello", message_id="<m1@example>")
        assert first.status_code == again.status_code == 202
        for key in ("dispatch_id", "run_id", "deployment_id", "seq"):
            assert first.json()[key] == again.json()[key]
        plain1 = await up.send(dep["address"], "no id")
        plain2 = await up.send(dep["address"], "no id")
        assert plain1.status_code == plain2.status_code == 202
        assert plain1.json()["dispatch_id"] != plain2.json()["dispatch_id"]
        rows = up.query(
            "SELECT message_id FROM workflow_run_dispatch WHERE deployment_id = ? ORDER BY seq",
            dep["id"],
        )
        assert rows == [("<m1@example>",), (None,), (None,)]
        run = await up.wait_state(first.json()["run_id"], lambda r: r["state"].get("count") == 3)
        assert [s["subject"] for s in run["state"]["seen"]] == ["hello", "no id", "no id"]


async def test_a_reused_message_id_fails_closed(tmp_path: Path) -> None:
    """The same message id with another body, subject or sender is 409
    message_id_reused (also through `mailrun send`, exit 1) and stores
    nothing; an exact retry is the first receipt; the run sees the mail once."""
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("reuse", recorder_source())
        mid = "<r1@example>"
        mail = {"subject": "hello", "body": "the body", "message_id": mid, "from": "ann@x.org"}
        first = await up.send(dep["address"], **mail)
        assert first.status_code == 202, first.text
        run_id, dispatch_id = first.json()["run_id"], first.json()["dispatch_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("count") == 1)
        for other in ({"body": "another body"}, {"subject": "hi"}, {"from": "eve@x.org"}):
            r = await up.send(dep["address"], **{**mail, **other})
            assert r.status_code == 409, (other, r.text)
            assert r.json()["status"] == "rejected" and r.json()["reason"] == "message_id_reused"
        argv = [MAILRUN, "send", dep["address"], "--subject", "hello", "--body", "changed",
                "--message-id", mid, "--from", "ann@x.org", *up.hub_options]  # fmt: skip
        cli = await anyio.run_process(argv, check=False)
        assert cli.returncode == 1 and cli.stdout == b""
        assert cli.stderr.decode().startswith("error: message_id_reused: ")
        again = await up.send(dep["address"], **mail)
        assert again.status_code == 202
        assert (again.json()["dispatch_id"], again.json()["duplicate"]) == (dispatch_id, True)
        # Nothing was stored: one dispatch, no seq consumed; the next mail is seq 2.
        rows = up.query(
            "SELECT id, seq FROM workflow_run_dispatch WHERE deployment_id = ?", dep["id"]
        )
        assert rows == [(dispatch_id, 1)]
        later = await up.send(dep["address"], "later", "x")
        assert later.status_code == 202 and later.json()["seq"] == 2
        run = await up.wait_state(run_id, lambda r: r["state"].get("count") == 2)
        seen = [(s["dispatch_id"], s["subject"], s["text"]) for s in run["state"]["seen"]]
        assert seen == [
            (dispatch_id, "hello", "the body"),
            (later.json()["dispatch_id"], "later", "x"),
        ]
        assert run["status"] == "running" and run["last_seq"] == 2


async def test_a_5_mib_body_arrives_through_the_claim_check(tmp_path: Path) -> None:
    body = os.urandom(5 * 1024 * 1024 // 2).hex()  # 5 MiB of text
    assert len(body) == 5 * 1024 * 1024
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("big", recorder_source())
        r = await up.send(dep["address"], "big one", body)
        assert r.status_code == 202, r.text
        digest = up.query(
            "SELECT body_digest, body_size, body FROM workflow_run_dispatch WHERE id = ?",
            r.json()["dispatch_id"],
        )
        assert digest[0][0] == "sha256:" + hashlib.sha256(body.encode()).hexdigest()
        assert digest[0][1] == len(body) and digest[0][2] is None
        run = await up.wait_state(r.json()["run_id"], lambda r: r["state"].get("count") == 1)
        seen = run["state"]["seen"][0]
        assert seen["size"] == len(body)
        assert seen["sha256"] == hashlib.sha256(body.encode()).hexdigest()
