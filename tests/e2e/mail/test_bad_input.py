"""Bad input gets a typed error and never disturbs what was accepted."""

from __future__ import annotations

from pathlib import Path

import msgspec
import nats
import pytest

from runtime import Ack, FrameDecoder

from ..harness import mailrun_up, recorder_source

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


async def test_hostile_bodies_are_typed_4xx_and_the_next_mail_is_processed(
    tmp_path: Path,
) -> None:
    deep = 1_000_000
    json_type = {"content-type": "application/json"}
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("target", recorder_source())
        to = dep["address"]
        cases: list[tuple[str, bytes | dict[str, object], int, str]] = [
            ("/mail", b'{"a":' + b"[" * deep + b"1" + b"]" * deep + b"}", 400, "malformed_json"),
            ("/workflows/deployments", b'{"x":' + b"{" * deep, 400, "malformed_json"),
            ("/mail", b'{"to": "' + to.encode() + b'", "subject": "\xff"}', 400, "malformed_json"),
            ("/mail", b'{"to": 1e999999}', 422, "invalid_mail"),
            ("/mail", b'{"to": ' + b"9" * 1_000_000 + b"}", 422, "invalid_mail"),
            ("/mail", {"to": [to], "subject": {"a": 1}}, 422, "invalid_mail"),
            ("/mail", {"to": to, "from": "a@b.c\r\nBcc: x@y.z"}, 422, "invalid_mail"),
            ("/mail", {"to": to, "subject": "hi\nX-Injected: 1"}, 422, "invalid_mail"),
            ("/mail", {"to": to, "message_id": "<m@x>\r\n"}, 422, "invalid_mail"),
            ("/mail", {"to": f"{to}\nBcc: x@y.z"}, 422, "invalid_mail"),
            ("/workflows/deployments", {"name": "n\n", "source": "x"}, 422, "invalid_name"),
            ("/workflows/deployments", {"name": "n", "source": "x", "entrypoint": "flow:main\n"},
             422, "invalid_deployment"),
            ("/workflows/deployments", {"name": "n", "files": {"x" * 300 + ".py": "",
             "flow.py": "x"}}, 422, "invalid_deployment"),
            ("/workflows/deployments", {"name": "n", "files": {"flow.py": "x",
             "flow.py/x.py": ""}}, 422, "invalid_deployment"),
        ]  # fmt: skip
        for path, body, status, reason in cases:
            if isinstance(body, bytes):
                r = await up.http.post(path, content=body, headers=json_type)
            else:
                r = await up.http.post(path, json=body)
            assert r.status_code == status, (path, r.text[:200])
            _is_error(r.json(), reason)
        plain = {"content-type": "text/plain"}
        r = await up.http.post("/mail", content=b'{"to": "' + to.encode() + b'"}', headers=plain)
        assert r.status_code == 415
        _is_error(r.json(), "unsupported_media_type")

        ok = await up.send(to, "after all that")
        assert ok.status_code == 202, ok.text
        run = await up.wait_state(ok.json()["run_id"], lambda r: r["state"].get("count") == 1)
        assert [s["subject"] for s in run["state"]["seen"]] == ["after all that"]
        assert up.query("SELECT COUNT(*) FROM workflow_run_dispatch") == [(1,)]
        assert up.query("SELECT name FROM deployment") == [("target",)]
        assert "Traceback" not in (up.state_dir / "logs" / "hub.log").read_text()


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
