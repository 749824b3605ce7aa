"""What a sidecar does with the frames it is sent: a duplicate stored once, out
of order processed in seq order, claim-checked bodies and raw messages
fetched and verified, garbage, corrupted blobs and frames for another
deployment or epoch refused, an item of a later version held until its code
is here. On an in-memory bus, against a scripted hub."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest

from runtime import (
    DispatchProcessed,
    RunStarted,
    Sources,
)
from tests.sidecar.app.records import seen
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    APPLIED,
    deployed_sidecar,
    mail,
    make_deployment,
)


@pytest.mark.anyio
async def test_a_duplicate_frame_is_acked_duplicate_and_stored_once(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        frame = mail(dep, 1, "hello")
        assert (await hub.deliver(frame)).result == "stored"
        assert (await hub.deliver(frame)).result == "duplicate"
        await hub.wait_events(DispatchProcessed, 1)
    assert dep.query("SELECT count(*) FROM inbox") == [(1,)]
    assert len(hub.of_kind(DispatchProcessed)) == 1


@pytest.mark.anyio
async def test_frames_arriving_out_of_order_are_processed_in_seq_order(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        for seq in (3, 2):
            assert (await hub.deliver(mail(dep, seq, f"m{seq}"))).result == "stored"
        assert car.runs is not None
        await car.runs.idle.wait()
        # Seq 1 is missing: nothing may run ahead of it.
        assert dep.query("SELECT count(*) FROM inbox WHERE state = 'pending'") == [(2,)]
        assert hub.of_kind(DispatchProcessed) == []
        assert (await hub.deliver(mail(dep, 1, "m1"))).result == "stored"
        await hub.wait_events(DispatchProcessed, 3)
    processed = hub.of_kind(DispatchProcessed)
    assert [e.seq for e in processed] == [1, 2, 3]
    assert [s["subject"] for s in seen(processed)] == ["m1", "m2", "m3"]


@pytest.mark.anyio
async def test_the_handler_sees_items_in_order_with_bodies(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    bodies = [b"plain text", "h\u00e9llo".encode(), b"\xff\xfe broken utf-8"]
    async with deployed_sidecar(dep) as (hub, _):
        for seq, body in enumerate(bodies, start=1):
            await hub.deliver(mail(dep, seq, f"s{seq}", body))
        await hub.wait_events(DispatchProcessed, 3)
    items = seen(hub.of_kind(DispatchProcessed))
    assert [i["text"] for i in items] == ["plain text", "h\u00e9llo", "\ufffd\ufffd broken utf-8"]
    assert [i["size"] for i in items] == [len(b) for b in bodies]
    assert {i["kind"] for i in items} == {"mail"}
    run_started = hub.of_kind(RunStarted)
    assert len(run_started) == 1
    assert {i["run_id"] for i in items} == {run_started[0].run_id}


@pytest.mark.anyio
async def test_claim_checked_body_is_fetched_and_verified(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    body = bytes(range(256)) * 1000  # 256 KB: several chunks
    async with deployed_sidecar(dep, chunk_size=100_000) as (hub, _):
        ack = await hub.deliver(mail(dep, 1, "big", None, claim=hub.claim(body)))
        assert ack.result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    assert seen(hub.of_kind(DispatchProcessed))[0]["size"] == len(body)


@pytest.mark.anyio
async def test_a_raw_message_is_fetched_and_given_to_the_handler_as_item_raw(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    raw = b"From: a@b.c\r\nSubject: big\r\n\r\n" + bytes(range(256)) * 700
    digest = hashlib.sha256(raw).hexdigest()
    async with deployed_sidecar(dep, chunk_size=100_000, corrupt_blobs=True) as (hub, _):
        frame = mail(dep, 1, "big", b"text", raw=hub.claim(raw))
        ack = await hub.deliver(frame)
        # The raw message is part of the dispatch: one that does not arrive
        # intact refuses it, and the hub sends it again.
        assert (ack.result, ack.reason) == ("refused", "digest_mismatch")
        assert dep.query("SELECT count(*) FROM inbox") == [(0,)]
        hub.corrupt_blobs = False
        assert (await hub.deliver(frame)).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    [item] = seen(hub.of_kind(DispatchProcessed))
    assert (item["text"], item["raw"]) == ("text", digest)


@pytest.mark.anyio
async def test_a_late_copy_of_an_applied_mail_is_a_duplicate_without_its_blob(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        frame = mail(dep, 1, "big", None, claim=hub.claim(b"x" * 70_000))
        assert (await hub.deliver(frame)).result == "stored"
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)])
        hub.blobs.clear()  # the hub collected it once the dispatch was processed
        assert (await hub.deliver(frame)).result == "duplicate"
        # Another copy under an id this inbox never kept: its seq is done here.
        late = mail(dep, 1, "big", None, claim=frame.claim)
        assert (await hub.deliver(late)).result == "duplicate"
    assert dep.query("SELECT count(*), sum(length(envelope)) FROM inbox") == [(1, 0)]


@pytest.mark.anyio
async def test_a_corrupted_blob_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, corrupt_blobs=True) as (hub, _):
        ack = await hub.deliver(mail(dep, 1, "big", None, claim=hub.claim(b"x" * 70_000)))
        assert ack.result == "refused"
        assert ack.reason.startswith("digest_mismatch")
        hub.corrupt_blobs = False  # the hub retries; now the blob comes intact
        frame = mail(dep, 1, "big", None, claim=hub.claim(b"y" * 70_000))
        assert (await hub.deliver(frame)).result == "stored"
    assert dep.query("SELECT count(*) FROM inbox") == [(1,)]


@pytest.mark.anyio
async def test_garbage_is_refused_and_dead_lettered_and_work_goes_on(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        ack = await hub.deliver(b"\xc1 not msgpack")
        assert (ack.dispatch_id, ack.result) == ("", "refused")
        assert ack.reason.startswith("decode_error")
        assert (await hub.deliver(mail(dep, 1, "after"))).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    assert dep.query("SELECT data FROM dead_letter") == [(b"\xc1 not msgpack",)]


@pytest.mark.anyio
async def test_frames_for_another_deployment_or_an_old_epoch_are_refused(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, epoch=2) as (hub, _):
        stale = await hub.deliver(mail(dep, 1, "old", owner_epoch=1))
        assert (stale.result, stale.reason) == ("refused", "stale_epoch")
        other = await hub.deliver(mail(dep, 1, "x", deployment_id="dep_" + "0" * 26))
        assert (other.result, other.reason) == ("refused", "wrong_deployment")
    assert dep.query("SELECT count(*) FROM inbox") == [(0,)]


VERSION_2 = """
async def main(ctx, item):
    ctx.state.setdefault("v2", []).append(item.subject)
"""


@pytest.mark.anyio
async def test_an_item_of_a_later_version_is_stored_once_its_code_is_here(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    sources = msgspec.json.encode(Sources(entrypoint="flow:main", files={"flow.py": VERSION_2}))
    async with deployed_sidecar(dep) as (hub, _):
        code = hub.claim(sources)
        hub.blobs.clear()  # the hub cannot give the code yet
        frame = mail(dep, 1, "first", version=2, code=code)
        ack = await hub.deliver(frame)
        assert (ack.result, ack.reason) == ("refused", "blob_unavailable")
        assert dep.query("SELECT count(*) FROM inbox") == [(0,)]
        hub.claim(sources)  # now it can: the hub's next round stores it
        assert (await hub.deliver(frame)).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    [processed] = hub.of_kind(DispatchProcessed)
    assert (processed.version, processed.state) == (2, {"v2": ["first"]})
