"""The outbox's tail in memory (sidecar/storage/inbox/_tail.py), on a real
file: once a read reached the outbox's end, a commit's events are read back
without reading the file, with the positions the file gives them; a
recorded step sends the next read back to the file, in order; an
acknowledgement's mark takes its rows out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest

from runtime import DispatchProcessed, RunStarted, new_id
from runtime.wire import StepRecorded
from sidecar import Inbox
from sidecar.storage import Commit, Envelope, Outgoing, outgoing
from sidecar.storage._outbox import unacked_events

pytestmark = pytest.mark.anyio


@pytest.fixture
async def inbox(tmp_path: Path) -> AsyncIterator[Inbox]:
    box = await Inbox.open(tmp_path / "inbox.db")
    try:
        yield box
    finally:
        await box.aclose()


async def process(inbox: Inbox, seq: int, *, started: bool = False) -> list[Outgoing]:
    """Store and process ``seq`` of run_a; its events (two with ``started``)."""
    e = Envelope(dispatch_id=new_id("dsp"), run_id="run_a", seq=seq)
    await inbox.store([e])
    done = DispatchProcessed(
        event_id=new_id("evt"), run_id="run_a", dispatch_id=e.dispatch_id, seq=seq
    )
    events = [outgoing(done)]
    if started:
        events.insert(0, outgoing(RunStarted(event_id=new_id("evt"), run_id="run_a", at=1.0)))
    consumed = [(e.dispatch_id, seq, "processed")]
    await inbox.commit(Commit(run_id="run_a", status="running", consumed=consumed, events=events))
    return events


async def in_file(inbox: Inbox, after: int) -> list[tuple[int, Outgoing]]:
    return await inbox.db.read(partial(unacked_events, limit=100, after=after))


async def test_a_commits_events_are_read_back_from_memory_with_the_files_positions(
    inbox: Inbox,
) -> None:
    first = await process(inbox, 1)
    read = await inbox.unacked(100)  # the file's end: the tail is known
    assert [e for _, e in read] == first
    reads: list[str] = []

    def traced(sql: str) -> None:
        if sql.startswith("SELECT pos"):
            reads.append(sql)

    await inbox.db.read(lambda conn: conn.set_trace_callback(traced))
    after = read[-1][0]
    for seq in (2, 3):
        events = await process(inbox, seq, started=seq == 3)  # one event, then two
        read = await inbox.unacked(100, after=after)
        assert [e for _, e in read] == events
        assert reads == []  # not read from the file
        assert read == await in_file(inbox, after)
        reads.clear()  # that read's
        after = read[-1][0]
    assert await inbox.unacked(100, after=after) == []


async def test_a_step_recorded_between_sends_the_next_read_to_the_file_in_order(
    inbox: Inbox,
) -> None:
    await process(inbox, 1)
    after = (await inbox.unacked(100))[-1][0]
    step = StepRecorded(
        event_id=new_id("evt"),
        run_id="run_a",
        at=1.0,
        dispatch_id=new_id("dsp"),
        name="charge",
        index=1,
        result=None,
        error=None,
        attempts=1,
    )
    await inbox.record_step(step)
    events = await process(inbox, 2)
    read = await inbox.unacked(100, after=after)
    assert [e.event_id for _, e in read] == [step.event_id, events[0].event_id]
    assert read == await in_file(inbox, after)


async def test_an_acknowledged_event_leaves_the_tail_with_its_row(inbox: Inbox) -> None:
    first = await process(inbox, 1)
    await inbox.unacked(100)
    second = await process(inbox, 2)
    await inbox.mark_acked(first)
    # From the start again (as after a failed request): what the file holds.
    read = await inbox.unacked(100)
    assert [e for _, e in read] == second
    assert read == await in_file(inbox, 0)
