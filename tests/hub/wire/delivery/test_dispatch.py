"""The outbox sender: reserved dispatches reach the sidecar in order, until acked."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from hub.wire.delivery.dispatcher import DispatchConfig
from hub.wire.delivery.sending import batches
from hub.wire.service import WireConfig
from runtime import (
    MAX_FRAME_BYTES,
    Ack,
    AckBatch,
    Backoff,
    FrameDecoder,
    MailBatch,
    MailInbound,
    Ping,
    Pong,
    TransportError,
    Welcome,
    encode,
    open_nats,
)
from runtime.wire import INLINE_BODY_LIMIT
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.wire import Hub, Inbox, Sidecar, accept, deploy, running_hub, served

FAST = WireConfig(
    dispatch=DispatchConfig(request_timeout=0.2, backoff=Backoff(0.05, 0.2), census_interval=0.1)
)


async def statuses(hub: Hub, dep_id: str) -> list[str]:
    rows = await hub.all(
        "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ? ORDER BY seq", dep_id
    )
    return [r["status"] for r in rows]


def all_are(hub: Hub, dep_id: str, status: str, n: int):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return await statuses(hub, dep_id) == [status] * n

    return check


@pytest.mark.anyio
async def test_delivers_reserved_dispatches_in_seq_order(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        car, inbox, receipts = await served(hub, tg, [f"body {i}".encode() for i in range(10)])
        dep, welcome = car.dep, car.welcome
        assert welcome is not None
        await wait_for(all_are(hub, dep.id, "delivered", 10))
        assert [f.seq for f in inbox.frames] == list(range(1, 11))
        assert [f.dispatch_id for f in inbox.frames] == [r.dispatch_id for r in receipts]
        first = inbox.frames[0]
        assert (first.run_id, first.address, first.body) == (
            receipts[0].run_id,
            dep.address,
            b"body 0",
        )
        assert (first.session_id, first.owner_epoch) == (welcome.session_id, 1)
        # Dispatches accepted later wake the idle sender at once.
        await accept(hub, dep, [b"late"])
        await wait_for(all_are(hub, dep.id, "delivered", 11))
        assert inbox.frames[-1].seq == 11 and len(inbox.frames) == 11
        rows = await hub.all("SELECT delivered_at FROM workflow_run_dispatch")
        assert all(r["delivered_at"] is not None for r in rows)
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("formats", [(1, 2, 3), (1, 2)], ids=["batches", "older-sidecar"])
async def test_a_sidecar_gets_batches_only_when_its_hello_lists_format_3(
    tmp_path: Path, formats: tuple[int, ...]
) -> None:
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        bodies = [f"body {i}".encode() for i in range(10)]
        car, inbox, receipts = await served(hub, tg, bodies, formats=formats)
        dep = car.dep
        await wait_for(all_are(hub, dep.id, "delivered", 10))
        assert [f.dispatch_id for f in inbox.frames] == [r.dispatch_id for r in receipts]
        if 3 in formats:
            assert 1 <= inbox.batches < 10  # a round or two, not a frame a dispatch
        else:
            assert inbox.batches == 0
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_an_answer_that_does_not_fit_the_batch_delivers_nothing(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await accept(hub, dep, [b"a", b"b", b"c"])
        # Acks for other dispatches: a forged or confused answer.
        car, inbox = (
            Sidecar(hub, dep),
            Inbox(answer=lambda f: Ack(dispatch_id="dsp_x", result="stored")),
        )
        await tg.start(inbox.serve, car)
        await car.hello()

        async def mismatched() -> bool:
            rows = await hub.all("SELECT last_error FROM workflow_run_dispatch")
            return all(r["last_error"] == "ack_mismatch" for r in rows)

        await wait_for(mismatched, what="every dispatch refused ack_mismatch")
        assert await statuses(hub, dep.id) == ["reserved"] * 3
        inbox.answer = lambda f: Ack(dispatch_id=f.dispatch_id, result="stored")
        await wait_for(all_are(hub, dep.id, "delivered", 3))
        tg.cancel_scope.cancel()


def test_a_round_is_packed_into_batches_within_the_frame_limit() -> None:
    frames = [
        MailInbound(dispatch_id=f"dsp_{i}", deployment_id="dep", address="a", body=b"x" * 60_000)
        for i in range(30)
    ]
    packed = batches(frames)
    assert [f for b in packed for f in b.items] == frames  # all, in order
    assert len(packed) == 3
    assert all(len(encode(b)) <= MAX_FRAME_BYTES for b in packed)
    assert batches([]) == []


@pytest.mark.anyio
async def test_window_bounds_frames_in_flight(tmp_path: Path) -> None:
    config = WireConfig(dispatch=DispatchConfig(window=3, request_timeout=0.2))
    async with running_hub(tmp_path, config=config) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await accept(hub, dep, [b"x"] * 7)
        car, inbox = Sidecar(hub, dep), Inbox(answer=lambda f: None)  # never acks
        await tg.start(inbox.serve, car)
        await car.hello()

        async def two_rounds() -> bool:
            return len(inbox.frames) >= 6

        await wait_for(two_rounds)
        # Nothing acked: the same three go out again, nothing past them.
        assert sorted(f.seq for f in inbox.frames[:6]) == [1, 1, 2, 2, 3, 3]
        assert await statuses(hub, dep.id) == ["reserved"] * 7
        tg.cancel_scope.cancel()


Answerer = Callable[[MailBatch], Awaitable[AckBatch]]


async def serve_each(
    car: Sidecar, answer: Answerer, *, task_status: Any = anyio.TASK_STATUS_IGNORED
) -> None:
    """A sidecar inbox that answers each MailBatch in its own task, so one
    answer may wait while later frames are answered."""
    decoder: FrameDecoder[MailBatch | Ping] = FrameDecoder(MailBatch | Ping)
    sub = await car.bus.subscribe(car.hub.subjects.inbound(car.dep.id))
    task_status.started()

    async def one(message: Any) -> None:
        frame = decoder.decode(message.data)
        reply = Pong() if isinstance(frame, Ping) else await answer(frame)
        if reply is not None:
            await message.respond(encode(reply))

    async with anyio.create_task_group() as tg:
        async for message in sub:
            tg.start_soon(one, message)


def stored(batch: MailBatch) -> AckBatch:
    return AckBatch(acks=[Ack(dispatch_id=f.dispatch_id, result="stored") for f in batch.items])


@pytest.mark.anyio
async def test_a_slow_answer_holds_only_its_own_frame(tmp_path: Path) -> None:
    # The first frame is answered only once seq 5 has arrived, which can
    # only be sent in the room the second frame's settled answer leaves.
    config = WireConfig(dispatch=DispatchConfig(window=4, frame_items=2, request_timeout=30))
    async with running_hub(tmp_path, config=config) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await accept(hub, dep, [f"m{i}".encode() for i in range(8)])
        sent: list[list[int | None]] = []
        five = anyio.Event()

        async def answer(batch: MailBatch) -> AckBatch:
            seqs = [f.seq for f in batch.items]
            sent.append(seqs)
            if 5 in seqs:
                five.set()
            if 1 in seqs:
                await five.wait()
            return stored(batch)

        car = Sidecar(hub, dep)
        await tg.start(serve_each, car, answer)
        await car.hello()
        await wait_for(all_are(hub, dep.id, "delivered", 8))
        assert sent[:3] == [[1, 2], [3, 4], [5, 6]]
        assert sorted(s for seqs in sent for s in seqs if s is not None) == list(range(1, 9))
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_trickle_goes_in_one_frame_per_round_trip(tmp_path: Path) -> None:
    # A frame that is not full holds the next load until it is settled:
    # mails accepted meanwhile go together in the next frame.
    config = WireConfig(dispatch=DispatchConfig(window=64, frame_items=8, request_timeout=30))
    async with running_hub(tmp_path, config=config) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        sent: list[list[int | None]] = []
        release = anyio.Event()

        async def answer(batch: MailBatch) -> AckBatch:
            sent.append([f.seq for f in batch.items])
            if len(sent) == 1:
                await release.wait()
            return stored(batch)

        car = Sidecar(hub, dep)
        await tg.start(serve_each, car, answer)
        await car.hello()
        await accept(hub, dep, [b"first"])
        await wait_for(lambda: sent == [[1]])
        for i in range(5):  # one at a time: five accepts, five wakeups
            await accept(hub, dep, [f"m{i}".encode()])
        assert sent == [[1]]
        release.set()
        await wait_for(all_are(hub, dep.id, "delivered", 6))
        assert sent == [[1], [2, 3, 4, 5, 6]]
        # What an operator reads of it: six delivered in two frames.
        got = hub.metrics.render()
        assert f'mailrun_deployment_frames_total{{deployment="{dep.id}"}} 2\n' in got
        assert f'mailrun_deployment_delivered_total{{deployment="{dep.id}"}} 6\n' in got
        tg.cancel_scope.cancel()


@pytest.mark.slow  # waits out a redelivery bound
@pytest.mark.anyio
async def test_a_dispatch_put_back_below_the_window_goes_out_while_frames_are_out(
    tmp_path: Path,
) -> None:
    # Seq 3's answer waits for seq 1 to come again: only the redelivery
    # sweep's rewind sends it while seq 3 is out (a request times out in 30 s).
    dispatch = DispatchConfig(
        window=4, frame_items=1, request_timeout=30, redeliver_after=0.3, census_interval=0.05
    )
    config = WireConfig(dispatch=dispatch)
    async with running_hub(tmp_path, config=config) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await accept(hub, dep, [b"a", b"b", b"c"])
        seen: list[int | None] = []
        again = anyio.Event()

        async def answer(batch: MailBatch) -> AckBatch:
            (frame,) = batch.items
            seen.append(frame.seq)
            if frame.seq == 1 and seen.count(1) == 2:
                again.set()
            if frame.seq == 3:
                await again.wait()
            return stored(batch)

        car = Sidecar(hub, dep)
        await tg.start(serve_each, car, answer)
        await car.hello()
        await wait_for(all_are(hub, dep.id, "delivered", 3))
        assert seen.count(1) >= 2 and seen.count(3) == 1
        assert seen.index(3) < len(seen) - 1 - seen[::-1].index(1)  # 1 again after 3 went
        tg.cancel_scope.cancel()


@pytest.mark.slow  # waits out request timeouts
@pytest.mark.anyio
async def test_unanswered_frame_is_retried_until_acked(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        receipts = await accept(hub, dep, [b"a", b"b", b"c"])
        lost = receipts[1].dispatch_id
        dropped: list[str] = []

        def answer(frame: MailInbound) -> Ack | None:
            if frame.dispatch_id == lost and len(dropped) < 2:
                dropped.append(frame.dispatch_id)
                return None  # the frame (or its ack) is lost in transit
            return Ack(dispatch_id=frame.dispatch_id, result="stored")

        car, inbox = Sidecar(hub, dep), Inbox(answer=answer)
        await tg.start(inbox.serve, car)
        await car.hello()
        await wait_for(all_are(hub, dep.id, "delivered", 3))
        assert [f.dispatch_id for f in inbox.frames].count(lost) == 3
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_refused_ack_is_recorded_and_retried(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        (receipt,) = await accept(hub, dep, [b"a"])
        refusals = 0

        def answer(frame: MailInbound) -> Ack:
            nonlocal refusals
            if refusals < 2:
                refusals += 1
                return Ack(dispatch_id=frame.dispatch_id, result="refused", reason="disk_full")
            return Ack(dispatch_id=frame.dispatch_id, result="duplicate")

        car, inbox = Sidecar(hub, dep), Inbox(answer=answer)
        await tg.start(inbox.serve, car)
        await car.hello()
        await wait_for(all_are(hub, dep.id, "delivered", 1))
        row = await hub.one(
            "SELECT attempts, last_error FROM workflow_run_dispatch WHERE id = ?",
            receipt.dispatch_id,
        )
        assert (row["attempts"], row["last_error"]) == (2, "disk_full")
        tg.cancel_scope.cancel()


@pytest.mark.slow  # waits out a sidecar's absence
@pytest.mark.anyio
async def test_sidecar_away_keeps_rows_and_rehello_drains_at_once(tmp_path: Path) -> None:
    # A long backoff: only the re-hello's kick can explain a quick delivery.
    config = WireConfig(dispatch=DispatchConfig(request_timeout=0.2, backoff=Backoff(30, 30)))
    async with running_hub(tmp_path, config=config) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await accept(hub, dep, [b"a", b"b"])
        car = Sidecar(hub, dep)
        await car.hello()  # nobody serves the inbound subject yet

        async def backing_off() -> bool:
            lanes = hub.wire.health()["lanes"]
            return bool(lanes.get(dep.id, {}).get("failures"))

        await wait_for(backing_off)
        assert await statuses(hub, dep.id) == ["reserved", "reserved"]

        async def counted() -> bool:
            return hub.wire.health()["pending"].get(dep.id, {}).get("count") == 2

        await wait_for(counted)
        inbox = Inbox()
        await tg.start(inbox.serve, car)
        await car.hello()
        await wait_for(all_are(hub, dep.id, "delivered", 2), timeout=2.0)
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_takeover_redelivers_delivered_unprocessed_to_the_new_owner(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await accept(hub, dep, [b"a", b"b"])
        old, old_inbox = Sidecar(hub, dep), Inbox()
        await tg.start(old_inbox.serve, old)
        await old.hello()
        await wait_for(all_are(hub, dep.id, "delivered", 2))
        await old.bus.aclose()  # the old host is gone
        new, new_inbox = Sidecar(hub, dep), Inbox()
        await tg.start(new_inbox.serve, new)
        taken = await new.hello(takeover=True)
        assert isinstance(taken, Welcome) and taken.owner_epoch == 2
        await wait_for(all_are(hub, dep.id, "delivered", 2))
        assert [f.seq for f in new_inbox.frames] == [1, 2]
        assert {f.owner_epoch for f in new_inbox.frames} == {2}
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_large_body_travels_as_a_claim_check(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        big = b"x" * (INLINE_BODY_LIMIT + 1)
        car, inbox, _ = await served(hub, tg, [big])
        dep = car.dep
        await wait_for(all_are(hub, dep.id, "delivered", 1))
        (frame,) = inbox.frames
        assert frame.body is None and frame.claim is not None
        assert frame.claim.size == len(big) and frame.claim.digest.startswith("sha256:")
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_over_real_nats_delivery_survives_a_server_restart(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with (
        open_nats(nats_server.url, name="hub") as hub_bus,
        open_nats(nats_server.url, name="sidecar") as car_bus,
        running_hub(tmp_path, config=FAST, transport=hub_bus) as hub,
        anyio.create_task_group() as tg,
    ):
        car, inbox, _ = await served(hub, tg, transport=car_bus, timeout=1.0)
        dep = car.dep
        await accept(hub, dep, [b"before"])
        await wait_for(all_are(hub, dep.id, "delivered", 1))

        nats_server.kill()
        await accept(hub, dep, [b"during"])  # accepted while the bus is down
        await nats_server.start()
        # The sidecar re-hellos once both ends are back (the hub's HubBoot
        # after its reconnect may reach it before its own reconnect: a real
        # sidecar also re-hellos on its own reconnect).

        async def welcomed() -> bool:
            try:
                return isinstance(await car.hello(), Welcome)
            except (TransportError, TimeoutError):
                return False

        await wait_for(welcomed, timeout=10)
        await wait_for(all_are(hub, dep.id, "delivered", 2), timeout=5.0)
        assert inbox.frames[0].body == b"before"
        assert inbox.frames[-1].body == b"during"
        tg.cancel_scope.cancel()


@pytest.mark.slow  # a thousand failing delivery rounds
@pytest.mark.anyio
async def test_a_lane_failing_over_a_thousand_rounds_keeps_the_hub_up_and_delivers_after(
    tmp_path: Path,
) -> None:
    # Time compressed by configuration: every round still fails and backs
    # off, after at most half a millisecond instead of 2 s.
    fast = WireConfig(dispatch=DispatchConfig(request_timeout=0.2, backoff=Backoff(0.0001, 0.0005)))
    async with running_hub(tmp_path, config=fast) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await accept(hub, dep, [b"a", b"b"])
        car = Sidecar(hub, dep)
        await car.hello()  # a session, and nobody serves the inbound subject

        def failures() -> int:
            return int(hub.wire.health()["lanes"].get(dep.id, {}).get("failures", 0))

        # Past round 1025, where the backoff once overflowed and the
        # exception took the whole hub down.
        await wait_for(lambda: failures() >= 1100, timeout=90, what="1100 failed rounds")
        assert await statuses(hub, dep.id) == ["reserved", "reserved"]
        inbox = Inbox()
        await tg.start(inbox.serve, car)
        await car.hello()
        await wait_for(all_are(hub, dep.id, "delivered", 2), timeout=5)
        assert failures() == 0
        tg.cancel_scope.cancel()
