"""Bad input gets a typed error and never disturbs what was accepted."""

from __future__ import annotations

from pathlib import Path

import msgspec
import nats
import pytest

from runtime import Ack, FrameDecoder

from .harness import mailrun_up, recorder_source

pytestmark = pytest.mark.anyio


def _is_error(body: dict[str, object], reason: str) -> None:
    assert body["reason"] == reason, body
    assert body["status"] in ("rejected", "error")
    assert isinstance(body["detail"], str) and body["detail"]


async def test_http_bad_input_is_typed_and_harmless(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("guarded", recorder_source())
        ok = await up.send(dep["address"], "accepted first")
        assert ok.status_code == 202

        r = await up.http.post(
            "/mail",
            content=b'{"to": "guarded@mailrun.local", "subj',
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400
        _is_error(r.json(), "malformed_json")

        r = await up.send("nobody@mailrun.local", "hi")
        assert r.status_code == 404
        _is_error(r.json(), "unknown_address")

        r = await up.http.post("/mail", json={"to": dep["address"], "subject": 5})
        assert r.status_code == 422
        _is_error(r.json(), "invalid_mail")

        r = await up.send(dep["address"], "huge", "x" * (17 * 1024 * 1024))
        assert r.status_code == 413
        _is_error(r.json(), "payload_too_large")

        r = await up.http.post(
            "/workflows/deployments", json={"name": "Bad Name!", "source": "x = 1"}
        )
        assert r.status_code == 422
        _is_error(r.json(), "invalid_name")

        run = await up.wait_state(ok.json()["run_id"], lambda r: r["state"].get("count") == 1)
        assert run["state"]["seen"][0]["subject"] == "accepted first"
        assert up.query("SELECT count(*) FROM workflow_run_dispatch")[0][0] == 1


async def test_a_garbage_frame_is_refused_and_the_sidecar_keeps_working(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("sturdy", recorder_source())
        first = await up.send(dep["address"], "one")
        await up.wait_state(first.json()["run_id"], lambda r: r["state"].get("count") == 1)
        nats_url = (await up.healthz())["nats_url"]
        nc = await nats.connect(nats_url, nkeys_seed_str=up.hub_seed)  # frames as the hub's
        try:
            subject = f"mailrun.mail.inbound.{dep['id']}"
            for garbage in (b"\xc1garbage", msgspec.msgpack.encode({"t": "MailInbound"})):
                reply = await nc.request(subject, garbage, timeout=5)
                ack = FrameDecoder(Ack).decode(reply.data)
                assert ack.result == "refused"
                assert ack.reason.startswith("decode_error")
        finally:
            await nc.close()
        second = await up.send(dep["address"], "two")
        run = await up.wait_state(second.json()["run_id"], lambda r: r["state"].get("count") == 2)
        assert [s["subject"] for s in run["state"]["seen"]] == ["one", "two"]
