"""A lone store's rows are taken for processing without reading them back:
when they are every pending row, the search walks them in memory, and finds
what it would have found in the file."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from runtime import DispatchProcessed, new_id
from sidecar.link import _shipper
from sidecar.storage import Commit, Envelope, Inbox
from sidecar.storage._queue import next_batch, next_rows, run_rows
from tests.support import wait_for
from tests.support.sidecar import deployed_sidecar, mail, make_deployment

pytestmark = pytest.mark.anyio

SEARCHES = ("SELECT run_id, seq FROM", "SELECT dispatch_id, run_id, seq")


async def test_a_lone_mail_is_processed_without_reading_its_row_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shipper, "MARK_WAIT", 60.0)
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        inbox = car.inbox
        assert inbox is not None
        await hub.deliver(mail(dep, 1, "one"))
        await hub.wait_events(DispatchProcessed, 1)
        seen: list[str] = []
        await inbox.db.read(lambda conn: conn.set_trace_callback(seen.append))
        try:
            two = mail(dep, 2, "two")
            assert (await hub.deliver(two)).result == "stored"
            await hub.wait_events(DispatchProcessed, 2)
            await wait_for(lambda: inbox.acks_held, what="the second mail's ack held")
        finally:
            await inbox.db.read(lambda conn: conn.set_trace_callback(None))
        assert [s for s in seen if s.startswith(SEARCHES)] == []
        assert hub.of_kind(DispatchProcessed)[1].dispatch_id == two.dispatch_id
    assert dep.query("SELECT seq, state FROM inbox ORDER BY seq") == [(1, "done"), (2, "done")]


async def searched(inbox: Inbox) -> None:
    """A search of the file (after an open, the inbox knows nothing yet)."""
    assert await inbox.pick(16) == ([], 0)


async def test_the_search_in_memory_finds_what_the_file_holds(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        await searched(inbox)
        runs = ["run_a", "run_b", "run_a", "run_c", "run_b"]
        batch = [
            Envelope(dispatch_id=new_id("dsp"), run_id=r, seq=i + 1) for i, r in enumerate(runs)
        ]
        assert await inbox.store(batch) == [True] * 5
        seen: list[str] = []
        await inbox.db.read(lambda conn: conn.set_trace_callback(seen.append))
        for busy in ((), ("run_a",), ("run_a", "run_b"), ("run_a", "run_b", "run_c")):
            for limit in (1, 2, 16):
                for after in (0, 2):
                    seen.clear()
                    memory = await inbox.pick(limit, busy, after)
                    assert seen == []  # nothing read
                    rows, source, scanned = await inbox.db.read(
                        partial(next_rows, last_seq=0, known=5, busy=busy, limit=limit, after=after)
                    )
                    assert source == "pending"
                    assert memory == (next_batch(rows, source), scanned), (busy, limit, after)
        for run_id in ("run_a", "run_b", "run_d"):
            seen.clear()
            memory_run = await inbox.run_batch(run_id, 16)
            assert seen == []
            rows, source = await inbox.db.read(
                partial(run_rows, run_id=run_id, last_seq=0, known=5, limit=16)
            )
            assert memory_run == next_batch(rows, source)
        await inbox.db.read(lambda conn: conn.set_trace_callback(None))
    finally:
        await inbox.aclose()


async def test_a_failed_attempt_is_read_back_with_its_count(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        await searched(inbox)
        e1 = Envelope(dispatch_id=new_id("dsp"), run_id="run_a", seq=1)
        await inbox.store([e1])
        (first,), _ = await inbox.pick(16)
        assert (first.dispatch_id, first.attempts) == (e1.dispatch_id, 0)
        # The commit of a failed attempt leaves the row pending, the
        # position where it was: the next search sees its attempt.
        failed = Commit(
            run_id="run_a", status="running", consumed=[], attempt=(e1.dispatch_id, "x")
        )
        await inbox.commit(failed)
        (again,), _ = await inbox.pick(16)
        assert (again.dispatch_id, again.attempts, again.failure) == (e1.dispatch_id, 1, "x")
    finally:
        await inbox.aclose()


async def test_a_store_behind_a_pending_row_is_searched_in_the_file(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        await searched(inbox)
        e1 = Envelope(dispatch_id=new_id("dsp"), run_id="run_a", seq=1)
        e2 = Envelope(dispatch_id=new_id("dsp"), run_id="run_b", seq=2)
        await inbox.store([e1])
        await inbox.store([e2])  # seq 1 still pending: the rows are not the store's alone
        batch, _ = await inbox.pick(16, busy=["run_a"])
        assert [p.dispatch_id for p in batch] == [e2.dispatch_id]
        batch, _ = await inbox.pick(16)
        assert [p.dispatch_id for p in batch] == [e1.dispatch_id]
    finally:
        await inbox.aclose()
