"""The inbox on its own: batches, ordering, guarded commits, the outbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime import DispatchProcessed, RunSnapshot, encode, new_id
from sidecar import Inbox, InboxConflict
from sidecar._envelope import Envelope
from sidecar._inbox import ADOPT_MARK, Commit


@pytest.fixture
async def inbox(tmp_path: Path) -> AsyncIterator[Inbox]:
    box = await Inbox.open(tmp_path / "inbox.db")
    try:
        yield box
    finally:
        await box.aclose()


def env(seq: int | None, run_id: str = "run_a", dispatch_id: str | None = None) -> Envelope:
    return Envelope(dispatch_id=dispatch_id or new_id("dsp"), run_id=run_id, seq=seq)


def consumed(batch: list[Envelope]) -> list[tuple[str, int | None, str]]:
    return [(e.dispatch_id, e.seq, "processed") for e in batch]


@pytest.mark.anyio
async def test_a_batch_reports_stored_and_duplicates_including_within_itself(
    inbox: Inbox,
) -> None:
    first = env(1)
    assert await inbox.store([first]) == [True]
    second = env(2)
    assert await inbox.store([first, second, second]) == [False, True, False]
    rows = await inbox.db.execute_fetchall("SELECT dispatch_id FROM inbox ORDER BY seq")
    assert [r[0] for r in rows] == [first.dispatch_id, second.dispatch_id]


@pytest.mark.anyio
async def test_next_batch_is_consecutive_of_one_run_and_stops_at_a_gap(inbox: Inbox) -> None:
    a1, a2, b3, b4, a6 = env(1), env(2), env(3, "run_b"), env(4, "run_b"), env(6)
    await inbox.store([a6, b4, a2, b3, a1])
    batch = await inbox.next_batch(64)
    assert [p.dispatch_id for p in batch] == [a1.dispatch_id, a2.dispatch_id]
    await inbox.commit(
        Commit(
            run_id="run_a",
            status="running",
            consumed=[(p.dispatch_id, p.seq, "processed") for p in batch],
        )
    )
    batch = await inbox.next_batch(64)
    assert [p.seq for p in batch] == [3, 4]
    assert {p.run_id for p in batch} == {"run_b"}
    await inbox.commit(
        Commit(
            run_id="run_b",
            status="running",
            consumed=[(p.dispatch_id, p.seq, "processed") for p in batch],
        )
    )
    assert await inbox.next_batch(64) == []  # seq 5 has not arrived
    assert inbox.last_seq == 4


@pytest.mark.anyio
async def test_a_commit_that_raced_writes_nothing(inbox: Inbox) -> None:
    e1 = env(1)
    await inbox.store([e1])
    event = DispatchProcessed(event_id=new_id("evt"), run_id="run_a", dispatch_id=e1.dispatch_id)
    step = Commit(
        run_id="run_a", status="running", consumed=consumed([e1]), state={"n": 1}, events=[event]
    )
    await inbox.commit(step)
    with pytest.raises(InboxConflict):
        await inbox.commit(step)  # the same envelopes again: no longer next
    rows = await inbox.db.execute_fetchall("SELECT count(*) FROM outbox")
    assert [tuple(r) for r in rows] == [(1,)]
    assert await inbox.unacked(10) == [encode(event)]
    await inbox.mark_acked([event.event_id])
    assert await inbox.unacked(10) == []


@pytest.mark.anyio
async def test_the_processing_position_survives_a_reopen(tmp_path: Path) -> None:
    box = await Inbox.open(tmp_path / "inbox.db")
    e1, e2 = env(1), env(2)
    await box.store([e1, e2])
    await box.commit(Commit(run_id="run_a", status="running", consumed=consumed([e1])))
    await box.aclose()
    box = await Inbox.open(tmp_path / "inbox.db")
    try:
        assert box.last_seq == 1
        assert [p.dispatch_id for p in await box.next_batch(64)] == [e2.dispatch_id]
    finally:
        await box.aclose()


@pytest.mark.anyio
async def test_raising_the_floor_skips_settled_envelopes(inbox: Inbox) -> None:
    await inbox.store([env(2), env(3), env(5)])
    assert await inbox.raise_floor(3) == 2
    assert await inbox.raise_floor(1) == 0  # a floor never moves back
    assert inbox.last_seq == 3
    assert await inbox.next_batch(64) == []  # seq 4 is missing
    await inbox.store([env(4)])
    assert [p.seq for p in await inbox.next_batch(64)] == [4, 5]


@pytest.mark.anyio
async def test_adopting_the_hubs_state_replaces_the_runs_and_drops_the_unshipped(
    inbox: Inbox,
) -> None:
    # A copied disk: run_a processed up to seq 3 here, with its events unshipped;
    # the hub applied only seq 1 and 2 of it (state {"n": 2}).
    e1, e2, e3, e4 = env(1), env(2), env(3), env(4)
    await inbox.store([e1, e2, e3, e4])
    event = DispatchProcessed(
        event_id=new_id("evt"), run_id="run_a", dispatch_id=e3.dispatch_id, seq=3
    )
    await inbox.commit(
        Commit(
            run_id="run_a",
            status="running",
            consumed=consumed([e1, e2, e3]),
            state={"n": 3},
            events=[event],
        )
    )
    await inbox.set_meta(ADOPT_MARK, 1)
    hub = [
        RunSnapshot(run_id="run_a", status="running", state={"n": 2}, last_seq=2),
        RunSnapshot(run_id="run_b", status="pending"),
    ]
    await inbox.adopt(hub, floor=2)
    record = await inbox.load_run("run_a")
    assert (record.status, record.state, record.last_seq) == ("running", {"n": 2}, 2)
    assert (await inbox.load_run("run_b")).status is None  # not started anywhere
    assert await inbox.unacked(10) == []
    assert inbox.last_seq == 2
    # seq 3 is processed again from the hub's state, then seq 4.
    assert [p.seq for p in await inbox.next_batch(64)] == [3, 4]
    assert await inbox.get_meta(ADOPT_MARK) is None
