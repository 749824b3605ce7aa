"""The hub's HTTP API against a Store in tmp_path (httpx ASGI transport), and
``python -m hub`` as a real process with a real nats-server."""

from __future__ import annotations

import base64
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime import read_restore_record
from runtime.sidecar_contract import decode_restore_record
from runtime.wire import INLINE_BODY_LIMIT, public_key_of
from tests.support import NatsServerProcess
from tests.support.launch.hubs import lone_hub

from ..harness import MAX_BODY, SOURCE, api, assert_error

pytestmark = pytest.mark.anyio

# Blobs that hold mail bodies (a version's sources are kept as a blob too).
_BODIES = "SELECT COUNT(*) FROM blob WHERE digest NOT IN (SELECT digest FROM deployment_version)"


async def test_deploy_send_and_inspect(tmp_path: Path) -> None:
    async with api(tmp_path, sidecar_root=tmp_path / "sidecars") as hub:
        dep = await hub.deploy("orders")
        assert dep["address"] == "orders@mailrun.local" and dep["status"] == "deployed"
        assert dep["id"].startswith("dep_") and dep["entrypoint"] == "flow:main"

        token = dep["join_token"]
        padded = token + "=" * (-len(token) % 4)
        record, version = decode_restore_record(base64.urlsafe_b64decode(padded))
        assert public_key_of(record.hub_key.seed) == dep["public_key"]
        assert record.sources.files == {"flow.py": SOURCE} and version == 2
        local = tmp_path / "sidecars" / dep["id"] / "workflow-runs" / dep["id"] / "deployment.json"
        assert dep["restore_record"] == str(local)
        assert stat.S_IMODE(local.stat().st_mode) == 0o600
        assert read_restore_record(local)[0].hub_key.seed == record.hub_key.seed
        listed = (await hub.client.get("/workflows/deployments")).json()["deployments"]
        assert [d["id"] for d in listed] == [dep["id"]] and "join_token" not in listed[0]

        r = await hub.send(
            "Orders@MailRun.local", body="hello", message_id="m-1", **{"from": "a@b.c"}
        )
        assert r.status_code == 202, r.text
        receipt = r.json()
        assert receipt["status"] == "accepted" and receipt["deployment_id"] == dep["id"]
        again = await hub.send(
            "orders@mailrun.local", body="hello", message_id="m-1", **{"from": "a@b.c"}
        )
        assert again.status_code == 202
        assert again.json() == {**receipt, "duplicate": True}
        other = await hub.send(
            "orders@mailrun.local", body_b64=base64.b64encode(b"\x00\xff").decode()
        )
        assert other.status_code == 202 and other.json()["seq"] == 2

        run = (await hub.client.get(f"/runs/{receipt['run_id']}")).json()
        assert run["is_top_level"] is True and run["status"] == "running"
        assert run["deployment_id"] == dep["id"] and run["state"] == {} and run["last_seq"] == 0
        runs = (await hub.client.get("/runs", params={"deployment": "orders"})).json()["runs"]
        assert [r["id"] for r in runs] == [receipt["run_id"]]
        dispatch = (await hub.client.get(f"/dispatches/{receipt['dispatch_id']}")).json()
        assert dispatch["seq"] == 1 and dispatch["status"] == "reserved"
        assert dispatch["message_id"] == "m-1" and dispatch["sender"] == "a@b.c"
        assert dispatch["run_id"] == receipt["run_id"] and dispatch["body_size"] == 5
        shown = (await hub.client.get("/workflows/deployments/orders")).json()
        assert shown["pending_dispatches"] == 2 and shown["top_level_run_id"] == receipt["run_id"]

        health = (await hub.client.get("/healthz")).json()
        assert health["status"] == "ok" and health["boot_id"] == "boot_x"
        assert health["connected_sidecars"] == 0
        metrics = (await hub.client.get("/metrics")).text
        assert "mailrun_triggers_accepted_total 2" in metrics
        assert "mailrun_triggers_duplicate_total 1" in metrics
        assert 'mailrun_dispatches{status="reserved"} 2' in metrics


async def test_bad_requests_get_typed_errors(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        r = await hub.client.post("/mail", content=b'{"to": "flow@mailrun.local",',
                                  headers={"content-type": "application/json"})  # fmt: skip
        assert_error(r, 400, "malformed_json")
        assert_error(await hub.client.post("/mail", json={"subject": "no to"}), 422, "invalid_mail")
        assert_error(await hub.send("not-an-address"), 422, "invalid_mail")
        assert_error(
            await hub.send("flow@mailrun.local", body="a", body_b64="YQ=="), 422, "invalid_mail"
        )
        assert_error(await hub.send("flow@mailrun.local", body_b64="***"), 422, "invalid_mail")
        r = await hub.send("nobody@mailrun.local", body="x")
        assert_error(r, 404, "unknown_address")
        assert r.json()["status"] == "rejected"
        assert_error(await hub.client.get("/runs/run_nope"), 404, "unknown_run")
        assert_error(await hub.client.get("/dispatches/dsp_nope"), 404, "unknown_dispatch")
        assert_error(await hub.client.get("/workflows/deployments/nope"), 404, "unknown_deployment")
        assert_error(await hub.client.get("/runs", params={"limit": "0"}), 422, "invalid_request")
        assert_error(await hub.client.get("/no/such/path"), 404, "not_found")
        assert_error(await hub.client.put("/mail"), 405, "method_not_allowed")
        assert_error(await hub.client.get("/mail/batch"), 405, "method_not_allowed")
        assert_error(await hub.client.get("/mail/"), 404, "not_found")
        plain = {"Content-Type": "text/plain"}
        r = await hub.client.post("/mail", content=b"{" * 10, headers=plain)
        assert_error(r, 415, "unsupported_media_type")
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 0


async def test_a_reused_message_id_is_409_and_stores_nothing(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep = await hub.deploy("flow")
        mail = {"message_id": "<m1@x>", "subject": "hi", "body": "hello", "from": "a@b.c"}
        first = await hub.send("flow@mailrun.local", **mail)
        assert first.status_code == 202, first.text
        big = base64.b64encode(b"z" * (INLINE_BODY_LIMIT + 1)).decode()
        for other in (
            {"body": "hullo"},
            {"body": None, "body_b64": big},
            {"subject": "hey"},
            {"from": "mallory@b.c"},
            {"from": None},
        ):
            r = await hub.send("flow@mailrun.local", **{**mail, **other})
            assert_error(r, 409, "message_id_reused")
            assert r.json()["status"] == "rejected" and first.json()["dispatch_id"] in r.text
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 1
        assert await hub.count(_BODIES) == 0
        assert await hub.count("SELECT next_seq FROM deployment WHERE id = ?", dep["id"]) == 2
        # The address's case is not content: the same deployment, an exact retry.
        again = await hub.send("FLOW@mailrun.local", **mail)
        assert again.status_code == 202 and again.json() == {**first.json(), "duplicate": True}
        metrics = (await hub.client.get("/metrics")).text
        assert 'mailrun_triggers_rejected_total{reason="message_id_reused"} 5' in metrics


async def test_oversized_mail_is_refused_with_413(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        # Decoded body over the limit, request itself within the raw bound.
        over = base64.b64encode(b"x" * (MAX_BODY + 1)).decode()
        assert_error(await hub.send("flow@mailrun.local", body_b64=over), 413, "payload_too_large")
        # Declared Content-Length over the raw bound: refused before reading.
        huge = b'{"to": "flow@mailrun.local", "body": "' + b"x" * (3 * MAX_BODY) + b'"}'
        r = await hub.client.post(
            "/mail", content=huge, headers={"content-type": "application/json"}
        )
        assert_error(r, 413, "payload_too_large")

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: bounded while reading
            yield b'{"to": "flow@mailrun.local", "body": "'
            for _ in range(3 * MAX_BODY // 65536):
                yield b"x" * 65536
            yield b'"}'

        r = await hub.client.post(
            "/mail", content=chunked(), headers={"content-type": "application/json"}
        )
        assert_error(r, 413, "payload_too_large")
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 0
        # The largest allowed body is accepted and kept as a blob.
        ok = await hub.send(
            "flow@mailrun.local", body_b64=base64.b64encode(b"y" * MAX_BODY).decode()
        )
        assert ok.status_code == 202, ok.text
        assert await hub.count("SELECT COUNT(*) FROM blob WHERE size = ?", MAX_BODY) == 1
        assert MAX_BODY > INLINE_BODY_LIMIT


async def test_deployment_names_and_delete(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        for bad in ("Caps", "9lives", "", "x" * 64, "under_score"):
            r = await hub.client.post(
                "/workflows/deployments", json={"name": bad, "source": SOURCE}
            )
            assert_error(r, 422, "invalid_name")
        r = await hub.client.post("/workflows/deployments", json={"name": 5})
        assert_error(r, 422, "invalid_deployment")
        r = await hub.client.post(
            "/workflows/deployments", json={"name": "x", "entrypoint": "nope"}
        )
        assert_error(r, 422, "invalid_deployment")
        r = await hub.client.post(
            "/workflows/deployments",
            json={"name": "x", "files": {"../evil.py": "", "flow.py": ""}},
        )
        assert_error(r, 422, "invalid_deployment")
        files = await hub.deploy("pkg", files={"app/flow.py": SOURCE}, entrypoint="app.flow:main")
        assert files["entrypoint"] == "app.flow:main"

        first = await hub.deploy("orders")
        r = await hub.client.post(
            "/workflows/deployments", json={"name": "orders", "source": SOURCE}
        )
        assert_error(r, 409, "name_taken")
        accepted = (await hub.send("orders@mailrun.local", body="x")).json()

        r = await hub.client.delete("/workflows/deployments/orders")
        assert r.status_code == 200 and r.json()["status"] == "deleted"
        again = await hub.client.delete(f"/workflows/deployments/{first['id']}")
        assert again.status_code == 200 and again.json()["deleted_at"] == r.json()["deleted_at"]
        assert (await hub.client.get(f"/runs/{accepted['run_id']}")).json()["status"] == "cancelled"
        dsp = (await hub.client.get(f"/dispatches/{accepted['dispatch_id']}")).json()
        assert dsp["status"] == "cancelled"
        assert_error(await hub.send("orders@mailrun.local"), 409, "deployment_not_live")

        second = await hub.deploy("orders")  # the name is free again
        assert second["id"] != first["id"] and second["address"] == first["address"]
        assert (await hub.client.get("/workflows/deployments/orders")).json()["id"] == second["id"]
        r = await hub.send("orders@mailrun.local")
        assert r.status_code == 202 and r.json()["deployment_id"] == second["id"]
        live = (
            await hub.client.get("/workflows/deployments", params={"status": "deployed"})
        ).json()
        assert sorted(d["name"] for d in live["deployments"]) == ["orders", "pkg"]


@pytest.mark.slow  # a real hub process
async def test_hub_process_serves_and_stops_on_sigterm(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with lone_hub(tmp_path, nats_server.url) as hub:
        health = hub.health
        assert health["nats_url"] == nats_server.url
        assert stat.S_IMODE(hub.token_file.stat().st_mode) == 0o600
        anonymous = await hub.client.http.get("/healthz", auth=None)
        assert anonymous.json() == {"status": health["status"]}
        assert health["boot_id"].startswith("boot_")
        await hub.client.deploy("p", SOURCE)
        r = await hub.client.http.post("/mail", json={"to": "p@mailrun.local", "subject": "s"})
        assert r.status_code == 202 and r.json()["status"] == "accepted"
    # It left on SIGTERM with status 0 (lone_hub checks), and said how it ran.
    log_path = hub.log
    (ready,) = [line for line in log_path.read_text().splitlines() if "hub ready" in line]
    assert ready.endswith(" loop=uvloop"), ready  # the default event loop
