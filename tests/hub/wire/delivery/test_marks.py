"""A lone mail's delivered mark: held after the ack, written by its events'
transaction, or alone once nobody took it in time."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hub.store import Fence
from hub.wire.delivery import Marks
from hub.wire.delivery.dispatcher import DispatchConfig
from hub.wire.delivery.window import Lane
from hub.wire.service import WireConfig
from runtime import Backoff, EventsAck, Wakeup
from tests.support import wait_for
from tests.support.harnesses.wire import accept, owned, processed, running_hub, send, served


def config(mark_wait: float, census_interval: float = 0.1) -> WireConfig:
    return WireConfig(
        dispatch=DispatchConfig(
            request_timeout=0.5,
            backoff=Backoff(0.05, 0.2),
            census_interval=census_interval,
            mark_wait=mark_wait,
        )
    )


@pytest.mark.anyio
async def test_a_transaction_takes_the_marks_of_its_own_fence_only() -> None:
    marks, woken, done = Marks(wait=10.0), [], []
    mine, other = Fence("dep_a", 1), Fence("dep_a", 2)
    held = marks.hold(mine, ["dsp_1"], 1.0, lambda: woken.append("mine"), done.append)
    stale = marks.hold(other, ["dsp_2"], 1.0, lambda: woken.append("other"), done.append)
    assert marks.waiting("dep_a") == 2
    taken = marks.take(mine)
    assert taken == [held] and marks.waiting("dep_a") == 1
    # While a transaction has it, the settler cannot write it alone.
    assert not marks.reclaim(held)
    marks.give_back(taken)
    assert woken == ["mine"] and marks.waiting("dep_a") == 2
    assert marks.reclaim(held) and marks.reclaim(stale)
    assert marks.waiting("dep_a") == 0 and marks.take(mine) == []
    again = marks.hold(mine, ["dsp_3"], 2.0, lambda: woken.append("again"), done.append)
    marks.written(marks.take(mine))
    assert again.written and done == [again] and not marks.reclaim(again)
    assert woken == ["mine"]  # a written mark wakes nobody


@pytest.mark.anyio
async def test_a_mark_nobody_takes_wakes_its_holder_when_due() -> None:
    marks, woken = Marks(wait=0.01), anyio.Event()
    held = marks.hold(Fence("dep_a", 1), ["dsp_1"], 1.0, woken.set, lambda h: None)
    with anyio.fail_after(5):
        await woken.wait()
    assert held.due and marks.reclaim(held) and marks.waiting("dep_a") == 0


@pytest.mark.anyio
async def test_the_events_transaction_writes_the_mark_it_finds_held(tmp_path: Path) -> None:
    # Nobody writes a mark alone within the test: only the events can.
    async with running_hub(tmp_path, config=config(600.0)) as hub, anyio.create_task_group() as tg:
        car, inbox, (receipt,) = await served(hub, tg, [b"lone"])
        dep = car.dep
        marks = hub.wire.dispatcher.marks
        assert marks is not None
        await wait_for(lambda: marks.waiting(dep.id) == 1)
        row = await hub.one(
            "SELECT status, delivered_at FROM workflow_run_dispatch WHERE id = ?",
            receipt.dispatch_id,
        )
        assert (row["status"], row["delivered_at"]) == ("reserved", None)
        assert isinstance(await send(car, processed(receipt)), EventsAck)
        row = await hub.one(
            "SELECT status, delivered_at FROM workflow_run_dispatch WHERE id = ?",
            receipt.dispatch_id,
        )
        assert row["status"] == "processed" and row["delivered_at"] is not None
        assert marks.waiting(dep.id) == 0
        # The window let it go: the next mail goes out in a frame of its own.
        await accept(hub, dep, [b"next"])
        await wait_for(lambda: [f.seq for f in inbox.frames] == [1, 2])
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_mark_nobody_takes_is_written_alone_and_sent_once(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=config(0.05)) as hub, anyio.create_task_group() as tg:
        car, inbox, receipts = await served(hub, tg, [b"a", b"b"])
        dep = car.dep

        async def delivered() -> bool:
            rows = await hub.all(
                "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ? ORDER BY seq",
                dep.id,
            )
            return [r["status"] for r in rows] == ["delivered", "delivered"]

        await wait_for(delivered)
        await accept(hub, dep, [b"c"])
        await wait_for(lambda: len(inbox.frames) == 3)
        # Held or written, a mark's dispatch is never sent twice.
        assert [f.dispatch_id for f in inbox.frames[:2]] == [r.dispatch_id for r in receipts]
        assert [f.seq for f in inbox.frames] == [1, 2, 3]
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_lone_mail_wakes_its_lane_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The accept's poke wakes the feed, which sends the lone frame and settles
    # its ack itself; the events' transaction that writes the held mark frees
    # room the feed was not waiting for. Neither wakes the feed again (each
    # did, a turn of the feed that found nothing to load).
    sets: dict[int, int] = {}
    lane_wakes: set[int] = set()
    real_set, real_poke = Wakeup.set, Lane.poke

    def counted_set(self: Wakeup) -> None:
        sets[id(self)] = sets.get(id(self), 0) + 1
        real_set(self)

    def recorded_poke(self: Lane) -> None:
        lane_wakes.add(id(self.wake))
        real_poke(self)

    # The census, a safety net that rewinds every lane with work, runs once
    # at the start only: on a loaded machine it came between the accept and
    # the send and woke the lane a second time, as it should.
    quiet = config(600.0, census_interval=600.0)
    async with running_hub(tmp_path, config=quiet) as hub, anyio.create_task_group() as tg:
        car, inbox, _ = await served(hub, tg)
        dep = car.dep
        marks = hub.wire.dispatcher.marks
        assert marks is not None
        monkeypatch.setattr(Wakeup, "set", counted_set)
        monkeypatch.setattr(Lane, "poke", recorded_poke)
        (receipt,) = await accept(hub, dep, [b"lone"])
        await wait_for(lambda: marks.waiting(dep.id) == 1)
        assert isinstance(await send(car, processed(receipt)), EventsAck)
        row = await hub.one(
            "SELECT status, delivered_at FROM workflow_run_dispatch WHERE id = ?",
            receipt.dispatch_id,
        )
        assert row["status"] == "processed" and row["delivered_at"] is not None
        assert len(lane_wakes) == 1 and [sets.get(i, 0) for i in lane_wakes] == [1]
        # The window let it go all the same: the next mail goes out at once.
        await accept(hub, dep, [b"next"])
        await wait_for(lambda: [f.seq for f in inbox.frames] == [1, 2])
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_events_that_come_before_the_ack_still_leave_a_delivered_time(
    tmp_path: Path,
) -> None:
    # After a hub restart the sidecar's events can settle a dispatch whose
    # stored Ack the new hub never saw (nobody answers its frame here): the
    # record must not show it processed and never delivered.
    async with running_hub(tmp_path, config=config(600.0)) as hub:
        car, (receipt,) = await owned(hub, 1)
        assert isinstance(await send(car, processed(receipt)), EventsAck)
        row = await hub.one(
            "SELECT status, delivered_at, processed_at FROM workflow_run_dispatch WHERE id = ?",
            receipt.dispatch_id,
        )
        assert row["status"] == "processed"
        assert row["delivered_at"] is not None and row["delivered_at"] <= row["processed_at"]
