"""Claim-checked bodies and raw messages: chunked fetch, access by
deployment, garbage collection."""

from __future__ import annotations

import hashlib
import os
from functools import partial
from pathlib import Path

import anyio
import pytest

from hub.store import Accepted, add_version, collect_blobs, pending_rollouts
from runtime import (
    BlobChunk,
    BlobGet,
    DispatchProcessed,
    EventsAck,
    RunEvents,
    Sources,
    Welcome,
    new_id,
)
from runtime.wire import BLOB_CHUNK_SIZE, INLINE_BODY_LIMIT
from tests.support import wait_for
from tests.support.harnesses.wire import Hub, Inbox, Sidecar, accept, deploy, refused, running_hub


async def processed(car: Sidecar, receipt: Accepted) -> None:
    """Tell the hub, as ``car``, that the dispatch of ``receipt`` is processed."""
    event = DispatchProcessed(
        event_id=new_id("evt"),
        run_id=receipt.run_id,
        dispatch_id=receipt.dispatch_id,
        seq=receipt.seq,
    )
    session_id, epoch = car.session
    frame = RunEvents(session_id=session_id, owner_epoch=epoch, events=[event])
    assert isinstance(await car.request(car.hub.subjects.events, frame), EventsAck)


async def fetch(car: Sidecar, digest: str) -> bytes:
    """A blob, chunk by chunk, as the sidecar's link fetches it."""
    data = b""
    while True:
        chunk = await car.request(car.hub.subjects.blob, get(car, digest, len(data)))
        assert isinstance(chunk, BlobChunk), chunk
        data += chunk.data
        if len(data) >= chunk.size:
            return data


def get(car: Sidecar, digest: str, offset: int = 0) -> BlobGet:
    return BlobGet(
        digest=digest, offset=offset, deployment_id=car.dep.id, session_id=car.session[0]
    )


async def blob_count(hub: Hub) -> int:
    return int(
        (
            await hub.one(
                "SELECT COUNT(*) AS n FROM blob"
                " WHERE digest NOT IN (SELECT digest FROM deployment_version)"
            )
        )["n"]
    )


@pytest.mark.anyio
async def test_chunks_reassemble_to_the_body(tmp_path: Path) -> None:
    body = os.urandom(2 * BLOB_CHUNK_SIZE + 12345)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        await accept(hub, dep, [body])
        car = Sidecar(hub, dep)
        assert isinstance(await car.hello(), Welcome)
        data, offset, chunks = b"", 0, 0
        while True:
            chunk = await car.request(hub.subjects.blob, get(car, digest, offset))
            assert isinstance(chunk, BlobChunk), chunk
            assert (chunk.digest, chunk.offset, chunk.size) == (digest, offset, len(body))
            assert len(chunk.data) <= BLOB_CHUNK_SIZE
            data += chunk.data
            offset += len(chunk.data)
            chunks += 1
            if offset >= chunk.size:
                break
        assert chunks == 3
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
        assert refused(
            await car.request(hub.subjects.blob, get(car, digest, len(body))), "bad_offset"
        )
        assert refused(await car.request(hub.subjects.blob, get(car, digest, -1)), "bad_offset")


@pytest.mark.anyio
async def test_only_the_deployments_own_bodies_are_served(tmp_path: Path) -> None:
    body = b"y" * (100 * 1024)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    async with running_hub(tmp_path) as hub:
        owner, other = await deploy(hub.store, "owner"), await deploy(hub.store, "other")
        await accept(hub, owner, [body])
        car = Sidecar(hub, other)
        assert isinstance(await car.hello(), Welcome)
        assert refused(await car.request(hub.subjects.blob, get(car, digest)), "unknown_blob")
        missing = "sha256:" + "0" * 64
        assert refused(await car.request(hub.subjects.blob, get(car, missing)), "unknown_blob")
        stranger = get(car, digest)
        stranger.session_id = new_id("ses")
        assert refused(await car.request(hub.subjects.blob, stranger), "unknown_session")


@pytest.mark.anyio
async def test_a_body_is_collected_once_its_dispatches_are_processed(tmp_path: Path) -> None:
    body = b"z" * (INLINE_BODY_LIMIT + 1)
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        # Two dispatches share one content-addressed blob.
        first, second = await accept(hub, dep, [body, body])
        assert await blob_count(hub) == 1
        car = Sidecar(hub, dep)
        assert isinstance(await car.hello(), Welcome)

        async def process(receipt: Accepted) -> None:
            await processed(car, receipt)

        assert await hub.store.transact(collect_blobs) == (0, True)  # both dispatches need it
        await process(first)
        assert await hub.store.transact(collect_blobs) == (0, True)  # the second still needs it
        assert await blob_count(hub) == 1
        await process(second)

        # Ingesting the last processing pokes the collector (its period is 30 s).
        async def collected() -> bool:
            return await blob_count(hub) == 0

        await wait_for(collected)


@pytest.mark.anyio
async def test_a_versions_sources_go_only_to_its_own_deployments_sidecar(tmp_path: Path) -> None:
    sources = Sources(
        entrypoint="flow:main", files={"flow.py": "async def main(c, i): pass  # 2\n"}
    )
    async with running_hub(tmp_path) as hub:
        owner, other = await deploy(hub.store, "owner"), await deploy(hub.store, "other")
        await hub.store.transact(partial(add_version, deployment_id=owner.id, sources=sources))
        [rollout] = await hub.store.read(pending_rollouts)
        digest = rollout.code.digest
        mine = Sidecar(hub, owner)
        assert isinstance(await mine.hello(), Welcome)
        chunk = await mine.request(hub.subjects.blob, get(mine, digest))
        assert isinstance(chunk, BlobChunk) and chunk.size == rollout.code.size
        car = Sidecar(hub, other)
        assert isinstance(await car.hello(), Welcome)
        assert refused(await car.request(hub.subjects.blob, get(car, digest)), "unknown_blob")


@pytest.mark.anyio
async def test_a_raw_message_is_claim_checked_served_to_its_deployment_and_collected(
    tmp_path: Path,
) -> None:
    # Bigger than a chunk, as a message with an attachment is; the body is
    # the text alone, inline.
    raw = b"Subject: hi\r\n\r\n" + os.urandom(BLOB_CHUNK_SIZE + 99)
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        owner, other = await deploy(hub.store, "owner"), await deploy(hub.store, "other")
        # Two recipients of one message: one blob, a claim on each dispatch.
        [mine] = await accept(hub, owner, [b"hi"], raw=raw)
        [theirs] = await accept(hub, other, [b"hi"], raw=raw)
        assert await blob_count(hub) == 1
        row = await hub.one(
            "SELECT body, body_digest, raw_digest, raw_size FROM workflow_run_dispatch"
            " WHERE id = ?",
            mine.dispatch_id,
        )
        assert (bytes(row["body"]), row["body_digest"]) == (b"hi", None)
        assert (row["raw_digest"], row["raw_size"]) == (digest, len(raw))

        car = Sidecar(hub, owner)
        assert isinstance(await car.hello(), Welcome)
        inbox = Inbox()
        await tg.start(inbox.serve, car)
        hub.wire.on_accepted({owner.id})
        await wait_for(lambda: inbox.frames, what="the dispatch")
        [frame] = inbox.frames
        assert frame.body == b"hi" and frame.claim is None
        assert frame.raw is not None and (frame.raw.digest, frame.raw.size) == (digest, len(raw))
        assert await fetch(car, digest) == raw

        # A sidecar reads only the raw messages of its own deployment's
        # dispatches: content addressing would otherwise let any sidecar
        # read any message whose digest it learns.
        stranger = Sidecar(hub, await deploy(hub.store, "stranger"))
        assert isinstance(await stranger.hello(), Welcome)
        assert refused(
            await stranger.request(hub.subjects.blob, get(stranger, digest)), "unknown_blob"
        )

        await processed(car, mine)
        assert await hub.store.transact(collect_blobs) == (0, True)  # the other dispatch holds it
        their_car = Sidecar(hub, other)
        assert isinstance(await their_car.hello(), Welcome)
        await processed(their_car, theirs)

        async def collected() -> bool:
            return await blob_count(hub) == 0

        await wait_for(collected)
        tg.cancel_scope.cancel()
