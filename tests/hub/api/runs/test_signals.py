"""Signals over HTTP against a real store: ``POST /runs/{id}/signals`` goes
through the one accept function, with a mail's guarantees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from runtime.wire import INLINE_BODY_LIMIT
from tests.support.store import execute, read_one

from ..harness import MAX_BODY, Api, api, assert_error

pytestmark = pytest.mark.anyio

JSON = {"content-type": "application/json"}


async def first_run(hub: Api, name: str = "flow") -> tuple[str, str]:
    """Deploy ``name`` and mail it: its deployment id and top-level run id."""
    dep = await hub.deploy(name)
    r = await hub.send(f"{name}@mailrun.local")
    assert r.status_code == 202, r.text
    return dep["id"], r.json()["run_id"]


async def signal(hub: Api, run_id: str, **body: Any) -> httpx.Response:
    return await hub.client.post(f"/runs/{run_id}/signals", json=body)


async def stored(hub: Api, dispatch_id: str) -> tuple[Any, ...]:
    """A dispatch's kind, subject, inline body, digest, size and message id."""
    row = await read_one(
        hub.store,
        "SELECT kind, subject, body, body_digest, body_size, message_id"
        " FROM workflow_run_dispatch WHERE id = ?",
        dispatch_id,
    )
    assert row is not None
    return tuple(row)


async def test_a_signal_is_a_dispatch_of_its_run_in_seq_order(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep_id, run_id = await first_run(hub)
        r = await signal(hub, run_id, name="restock", payload={"sku": "a-1", "qty": 3})
        assert r.status_code == 202, r.text
        receipt = r.json()
        # The same receipt as POST /mail's.
        assert receipt == {
            "status": "accepted", "dispatch_id": receipt["dispatch_id"], "run_id": run_id,
            "deployment_id": dep_id, "seq": 2, "duplicate": False,
        }  # fmt: skip
        later = await hub.send("flow@mailrun.local")
        assert (later.json()["run_id"], later.json()["seq"]) == (run_id, 3)

        kind, subject, body, digest, size, mid = await stored(hub, receipt["dispatch_id"])
        assert (kind, subject, digest, size, mid) == ("signal", "restock", None, len(body), None)
        assert msgspec.json.decode(body) == {"sku": "a-1", "qty": 3}
        dsp = (await hub.client.get(f"/dispatches/{receipt['dispatch_id']}")).json()
        assert (dsp["kind"], dsp["run_id"], dsp["status"]) == ("signal", run_id, "reserved")

        # Any JSON value is a payload; none at all is null.
        for payload in [None, 0, -1.5, "text", [1, [2, {"x": None}]], True, {}]:
            r = await signal(hub, run_id, name="any", payload=payload)
            assert r.status_code == 202, r.text
            assert msgspec.json.decode((await stored(hub, r.json()["dispatch_id"]))[2]) == payload
        r = await signal(hub, run_id, name="bare")
        assert r.status_code == 202 and (await stored(hub, r.json()["dispatch_id"]))[2] == b"null"


async def test_a_message_id_makes_a_signal_idempotent(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        _, run_id = await first_run(hub)
        first = await signal(hub, run_id, name="go", payload={"a": 1, "b": [2]}, message_id="s-1")
        assert first.status_code == 202, first.text
        again = await signal(hub, run_id, name="go", payload={"a": 1, "b": [2]}, message_id="s-1")
        assert again.status_code == 202 and again.json() == {**first.json(), "duplicate": True}
        # One value, one encoding: another key order is the same content.
        raw = b'{"message_id": "s-1", "payload": {"b": [2], "a": 1}, "name": "go"}'
        reordered = await hub.client.post(f"/runs/{run_id}/signals", content=raw, headers=JSON)
        assert reordered.status_code == 202 and reordered.json()["duplicate"] is True
        assert reordered.json()["dispatch_id"] == first.json()["dispatch_id"]

        for other in [{"payload": {"a": 2, "b": [2]}}, {"payload": None}, {"name": "stop"}]:
            body = {"name": "go", "payload": {"a": 1, "b": [2]}, "message_id": "s-1", **other}
            assert_error(await signal(hub, run_id, **body), 409, "message_id_reused")
        # A mail and a signal share the deployment's message ids (the kind differs).
        mail = await hub.send("flow@mailrun.local", subject="go", message_id="s-1")
        assert_error(mail, 409, "message_id_reused")
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 2
        assert await hub.count("SELECT next_seq FROM deployment") == 3  # no seq taken
        plain = [await signal(hub, run_id, name="go") for _ in range(2)]
        assert plain[0].json()["dispatch_id"] != plain[1].json()["dispatch_id"]


async def test_a_signal_to_an_unknown_or_ended_run_is_refused(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep_id, run_id = await first_run(hub)
        assert_error(await signal(hub, "run_" + "0" * 26, name="x"), 404, "unknown_run")
        assert_error(await signal(hub, dep_id, name="x"), 404, "unknown_run")  # an anchor row
        assert_error(await signal(hub, "nonsense", name="x"), 404, "unknown_run")
        retried = await signal(hub, run_id, name="x", message_id="before-the-end")
        assert retried.status_code == 202

        # What ingesting RunCompleted leaves.
        await execute(
            hub.store, "UPDATE workflow_run SET status = 'completed' WHERE id = ?", run_id
        )
        r = await signal(hub, run_id, name="x", payload=1)
        assert_error(r, 409, "workflow_run_terminal")
        assert r.json()["status"] == "rejected"
        # A retry of a signal accepted before the run ended is its first receipt.
        again = await signal(hub, run_id, name="x", message_id="before-the-end")
        assert again.status_code == 202
        assert again.json()["dispatch_id"] == retried.json()["dispatch_id"]
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 2


async def test_a_signal_to_a_deleted_deployments_run_is_refused(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        _, run_id = await first_run(hub)
        assert (await hub.client.delete("/workflows/deployments/flow")).status_code == 200
        assert_error(await signal(hub, run_id, name="x"), 409, "deployment_not_live")
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 1


async def test_names_message_ids_and_bodies_are_checked(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        _, run_id = await first_run(hub)
        for body in [
            {"name": ""},
            {"name": "x" * 201},
            {"name": "a\nb"},
            {"name": "a\r"},
            {"name": "a\x00"},
            {"name": 5},
            {"name": None},
            {"payload": 1},
            {"name": "ok", "message_id": ""},
            {"name": "ok", "message_id": "m" * 513},
            {"name": "ok", "message_id": "m\r\nX: y"},
        ]:
            assert_error(await signal(hub, run_id, **body), 422, "invalid_signal")
        path = f"/runs/{run_id}/signals"
        for raw in [b"", b"{", b'{"name": "ok", "payload": ' + b"[" * 30_000, b"\xff"]:
            r = await hub.client.post(path, content=raw, headers=JSON)
            assert_error(r, 400, "malformed_json")
        for raw in [b"[]", b'{"name": "ok", "payload": 1e400}']:  # a shape, a float out of range
            r = await hub.client.post(path, content=raw, headers=JSON)
            assert_error(r, 422, "invalid_signal")
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 1
        ok = await signal(hub, run_id, name="n" * 200, message_id="m" * 512)
        assert ok.status_code == 202, ok.text
        assert (await hub.client.get(path)).status_code == 405


async def test_a_payload_is_held_to_the_body_limit(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        _, run_id = await first_run(hub)
        big = "x" * (MAX_BODY - 2)  # with its quotes, exactly the limit
        r = await signal(hub, run_id, name="big", payload=big)
        assert r.status_code == 202, r.text
        _, _, body, digest, size, _ = await stored(hub, r.json()["dispatch_id"])
        # Past the inline limit the payload is a claim-checked blob, like a mail body.
        assert size == MAX_BODY > INLINE_BODY_LIMIT and body is None
        assert digest is not None and digest.startswith("sha256:")
        too_big = await signal(hub, run_id, name="big", payload=big + "x")
        assert_error(too_big, 413, "payload_too_large")
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 2


async def test_message_ids_the_hub_derives_for_its_own_items_are_refused(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        _, run_id = await first_run(hub)
        reserved = ["start:run_1", "child:run_1", "approval:apr_1:approve", "dsp_0a1b:mail:1",
                    "cancel:run_1", "terminate:run_1", "timer:tmr_1",
                    "schedule:sch_1:1700000000.0", "bounce:out_1"]  # fmt: skip
        for message_id in reserved:
            r = await hub.send("flow@mailrun.local", message_id=message_id)
            assert_error(r, 422, "invalid_mail")
            r = await signal(hub, run_id, name="s", message_id=message_id)
            assert_error(r, 422, "invalid_signal")
        # Only as a prefix: the same words elsewhere are a client's to use.
        r = await hub.send("flow@mailrun.local", message_id="<start:1@example.org>")
        assert r.status_code == 202, r.text
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 2
