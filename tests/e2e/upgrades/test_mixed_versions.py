"""Mixed versions on the wire: frames shaped as an older writer left them.

Each frame here is a plain msgpack map, not one of this release's Structs,
so the test holds only what that writer sent, never a field added later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import DispatchProcessed, EventsAck, RunStarted, Welcome, new_id
from tests.support.harnesses.sidecar import deployed_sidecar, make_deployment
from tests.support.harnesses.wire import Sidecar, accept, deploy, running_hub

pytestmark = pytest.mark.anyio


def release_1_mail(
    dep_id: str, address: str, subject: str, epoch: int, session_id: str
) -> dict[str, Any]:
    """A ``MailInbound`` in release 1's format: no ``run_id`` (the run is the
    address) and no ``seq``; stamped with the sidecar's session, without which
    a sidecar takes no frame (a session id it does not hold is not the hub's
    frame to it: docs/security.md)."""
    return {
        "t": "MailInbound",
        "v": 1,
        "dispatch_id": new_id("dsp"),
        "deployment_id": dep_id,
        "address": address,
        "kind": "mail",
        "message_id": None,
        "sender": "old@example.org",
        "subject": subject,
        "body": subject.encode(),
        "claim": None,
        "start_request_id": None,
        "owner_epoch": epoch,
        "session_id": session_id,
    }


async def test_the_sidecar_takes_release_1_frames_into_the_address_run(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        session = hub.welcomes[-1].session_id
        frames = [
            release_1_mail(dep.id, dep.address, s, hub.epoch, session) for s in ("one", "two")
        ]
        for frame in frames:
            assert (await hub.deliver(msgspec.msgpack.encode(frame))).result == "stored"
        again = await hub.deliver(msgspec.msgpack.encode(frames[0]))
        assert again.result == "duplicate"
        await hub.wait_events(DispatchProcessed, 2)
    events = sorted(hub.of_kind(DispatchProcessed), key=lambda e: len(e.state["seen"]))
    assert {e.run_id for e in events} == {dep.address}
    assert [e.dispatch_id for e in events] == [f["dispatch_id"] for f in frames]
    assert [s["subject"] for s in events[-1].state["seen"]] == ["one", "two"]
    assert [s["run_id"] for s in events[-1].state["seen"]] == [dep.address] * 2
    assert dep.query("SELECT run_id, seq FROM inbox ORDER BY rowid") == [(dep.address, None)] * 2


async def test_the_hub_takes_events_without_the_fields_added_later(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        (receipt,) = await accept(hub, dep, [b"m0"])
        car = Sidecar(hub, dep)
        assert isinstance(await car.hello(), Welcome)
        session_id, epoch = car.session
        started, processed = new_id("evt"), new_id("evt")
        # No RunEvents.deployment_id; no event ``at``; no DispatchProcessed
        # ``seq`` or ``outcome``: fields this release added with defaults.
        frame = {
            "t": "RunEvents",
            "v": 1,
            "session_id": session_id,
            "owner_epoch": epoch,
            "events": [
                {"t": "RunStarted", "event_id": started, "run_id": receipt.run_id},
                {
                    "t": "DispatchProcessed",
                    "event_id": processed,
                    "run_id": receipt.run_id,
                    "dispatch_id": receipt.dispatch_id,
                    "state": {"seen": 1},
                },
            ],
        }
        ack = await car.request(hub.subjects.events, msgspec.msgpack.encode(frame))
        assert isinstance(ack, EventsAck) and ack.ids == [started, processed]
        dispatch = await hub.one(
            "SELECT status FROM workflow_run_dispatch WHERE id = ?", receipt.dispatch_id
        )
        assert dispatch["status"] == "processed"
        run = await hub.one(
            "SELECT status, last_seq, state FROM workflow_run WHERE id = ?", receipt.run_id
        )
        assert (run["status"], run["last_seq"], json.loads(run["state"])) == (
            "running",
            receipt.seq,  # the hub's own seq stands in for the missing one
            {"seen": 1},
        )
        kinds = await hub.all("SELECT kind FROM run_event ORDER BY kind")
        assert [k["kind"] for k in kinds] == [DispatchProcessed.__name__, RunStarted.__name__]
