"""The inbox on its own: batches, ordering, guarded commits, the outbox."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import DispatchProcessed, EnvelopeQuarantined, RunSnapshot, new_id
from sidecar import Inbox, InboxConflict
from sidecar.storage import (
    ADOPT_MARK,
    FREE_BYTES_KEPT,
    Commit,
    Envelope,
    Outgoing,
    encode_run_state,
    outgoing,
)
from sidecar.storage._outbox import settled_dispatch, settled_statements
from sidecar.storage._queue import LEGACY_PENDING, NEXT_PENDING, NEXT_RUN_PENDING, RUN_PENDING


@pytest.fixture
async def inbox(tmp_path: Path) -> AsyncIterator[Inbox]:
    box = await Inbox.open(tmp_path / "inbox.db")
    try:
        yield box
    finally:
        await box.aclose()


@pytest.fixture
async def two_kept(tmp_path: Path) -> AsyncIterator[Inbox]:
    """An inbox that keeps 2 done rows behind its position."""
    box = await Inbox.open(tmp_path / "inbox.db", done_kept=2)
    try:
        yield box
    finally:
        await box.aclose()


def env(seq: int | None, run_id: str = "run_a", dispatch_id: str | None = None) -> Envelope:
    return Envelope(dispatch_id=dispatch_id or new_id("dsp"), run_id=run_id, seq=seq)


async def frames(inbox: Inbox, after: int = 0) -> list[bytes]:
    return [event.frame for _, event in await inbox.unacked(10, after=after)]


async def query(inbox: Inbox, sql: str, *params: object) -> list[tuple[Any, ...]]:
    return await inbox.db.read(lambda conn: [tuple(r) for r in conn.execute(sql, params)])


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
    rows = await query(inbox, "SELECT dispatch_id FROM inbox ORDER BY seq")
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
async def test_release_1_envelopes_come_first_in_arrival_order_then_by_seq(
    inbox: Inbox,
) -> None:
    late, early, one = env(None), env(None), env(1)
    await inbox.store([one])
    await inbox.store([late])
    await inbox.store([early])
    batch = await inbox.next_batch(64)
    assert [p.dispatch_id for p in batch] == [late.dispatch_id, early.dispatch_id]


@pytest.mark.anyio
async def test_the_next_batch_walks_the_index_and_never_sorts_the_backlog(inbox: Inbox) -> None:
    for sql, params in [
        (NEXT_PENDING, (0, 10**6, 4096, '["run_a"]')),
        (NEXT_RUN_PENDING, (0, 10**6, 4096, '["run_a"]', 10**6, 4096, 64)),
        (RUN_PENDING, (1, 4097, "run_a", 64)),
        (LEGACY_PENDING, (64,)),
    ]:
        rows = await query(inbox, f"EXPLAIN QUERY PLAN {sql}", *params)
        plan = " ".join(str(row[-1]) for row in rows)
        assert "inbox_pending" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


@pytest.mark.anyio
async def test_acknowledged_rows_are_found_by_dispatch_id_not_by_scanning_the_done_ones(
    inbox: Inbox,
) -> None:
    # Thousands of done rows wait for their acks under load: an ack must not
    # walk them all.
    for sql, params in zip(settled_statements(2), [(5, "a", "b"), (b"", "a", "b")], strict=True):
        rows = await query(inbox, f"EXPLAIN QUERY PLAN {sql}", *params)
        plan = " ".join(str(row[-1]) for row in rows)
        assert "(dispatch_id=?)" in plan and "inbox_pending" not in plan, plan


@pytest.mark.anyio
async def test_a_commit_that_raced_writes_nothing(inbox: Inbox) -> None:
    e1 = env(1)
    await inbox.store([e1])
    event = outgoing(
        DispatchProcessed(event_id=new_id("evt"), run_id="run_a", dispatch_id=e1.dispatch_id)
    )
    step = Commit(
        run_id="run_a",
        status="running",
        consumed=consumed([e1]),
        state=encode_run_state({"n": 1}),
        events=[event],
    )
    await inbox.commit(step)
    with pytest.raises(InboxConflict):
        await inbox.commit(step)  # the same envelopes again: no longer next
    assert await query(inbox, "SELECT count(*) FROM outbox") == [(1,)]
    assert await frames(inbox) == [event.frame]
    await inbox.mark_acked([event])
    assert await frames(inbox) == []


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
    event = outgoing(
        DispatchProcessed(event_id=new_id("evt"), run_id="run_a", dispatch_id=e3.dispatch_id, seq=3)
    )
    await inbox.commit(
        Commit(
            run_id="run_a",
            status="running",
            consumed=consumed([e1, e2, e3]),
            state=encode_run_state({"n": 3}),
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
    assert await frames(inbox) == []
    assert inbox.last_seq == 2
    # seq 3 is processed again from the hub's state, then seq 4.
    assert [p.seq for p in await inbox.next_batch(64)] == [3, 4]
    assert await inbox.get_meta(ADOPT_MARK) is None


async def bodies(inbox: Inbox) -> dict[int, bool]:
    """seq -> whether the row still holds its envelope."""
    rows = await query(inbox, "SELECT seq, length(envelope) > 0 FROM inbox")
    return {r[0]: bool(r[1]) for r in rows}


def processed(e: Envelope) -> Outgoing:
    return outgoing(
        DispatchProcessed(
            event_id=new_id("evt"), run_id="run_a", dispatch_id=e.dispatch_id, seq=e.seq
        )
    )


async def process(inbox: Inbox, seqs: range) -> list[Outgoing]:
    """Store and process ``seqs`` of run_a; their events."""
    batch = [env(s) for s in seqs]
    await inbox.store(batch)
    events = [processed(e) for e in batch]
    await inbox.commit(
        Commit(run_id="run_a", status="running", consumed=consumed(batch), events=events)
    )
    return events


@pytest.mark.anyio
async def test_unacknowledged_events_are_read_in_order_after_a_position(inbox: Inbox) -> None:
    e1, e2, e3 = env(1), env(2), env(3)
    await inbox.store([e1, e2, e3])
    events = [processed(e) for e in (e1, e2, e3)]
    for e, event in zip((e1, e2), events, strict=False):
        await inbox.commit(
            Commit(run_id="run_a", status="running", consumed=consumed([e]), events=[event])
        )
    (first, _), (second, _) = await inbox.unacked(10)
    assert await frames(inbox, after=first) == [events[1].frame]
    assert await frames(inbox, after=second) == []
    # A later commit comes after every position read before it.
    await inbox.commit(
        Commit(run_id="run_a", status="running", consumed=consumed([e3]), events=events[2:])
    )
    assert await frames(inbox, after=second) == [events[2].frame]
    await inbox.mark_acked(events[:1])
    assert await frames(inbox) == [e.frame for e in events[1:]]


@pytest.mark.anyio
async def test_an_envelope_the_hub_applied_drops_its_body_and_stays_a_duplicate(
    inbox: Inbox,
) -> None:
    e1, e2, e3 = (Envelope(dispatch_id=new_id("dsp"), run_id="run_a", seq=s, body=b"x" * 1000)
                  for s in (1, 2, 3))  # fmt: skip
    await inbox.store([e1, e2, e3])
    events = [processed(e1), processed(e2)]
    await inbox.commit(
        Commit(run_id="run_a", status="running", consumed=consumed([e1, e2]), events=events)
    )
    await inbox.mark_acked(events[:1])
    assert await bodies(inbox) == {1: False, 2: True, 3: True}  # seq 2: not applied yet
    assert await inbox.store([e1]) == [False]  # a late copy is still a duplicate
    assert await frames(inbox) == [events[1].frame]
    await inbox.mark_acked(events[1:2])
    assert await bodies(inbox) == {1: False, 2: False, 3: True}  # seq 3: not processed
    assert await query(inbox, "SELECT count(*) FROM outbox") == [
        (0,)
    ]  # acknowledged events leave at once


@pytest.mark.anyio
async def test_envelopes_at_or_below_the_hubs_floor_drop_their_bodies(inbox: Inbox) -> None:
    await inbox.store([env(2), env(3), env(5)])
    await inbox.raise_floor(3)
    assert await bodies(inbox) == {2: False, 3: False, 5: True}


@pytest.mark.anyio
async def test_adopting_drops_bodies_up_to_the_floor_and_reopens_only_whole_rows(
    inbox: Inbox,
) -> None:
    e1, e2, e3, e4 = env(1), env(2), env(3), env(4)
    await inbox.store([e1, e2, e3, e4])
    applied, unshipped = processed(e3), processed(e4)
    await inbox.commit(Commit(run_id="run_a", status="running", consumed=consumed([e1, e2])))
    await inbox.commit(
        Commit(run_id="run_a", status="running", consumed=consumed([e3]), events=[applied])
    )
    await inbox.commit(
        Commit(run_id="run_a", status="running", consumed=consumed([e4]), events=[unshipped])
    )
    await inbox.mark_acked([applied])  # the hub applied seq 3: its body goes
    await inbox.adopt([RunSnapshot(run_id="run_a", status="running", last_seq=3)], floor=2)
    assert await bodies(inbox) == {1: False, 2: False, 3: False, 4: True}
    # Seq 3 was applied by the hub (whatever its floor says): done for good,
    # and a duplicate; seq 4 is processed again.
    assert await inbox.store([e3]) == [False]
    assert inbox.last_seq == 3
    assert [p.seq for p in await inbox.next_batch(64)] == [4]


@pytest.mark.anyio
async def test_undecodable_frames_are_kept_bounded_per_subject(inbox: Inbox) -> None:
    from sidecar.storage._intake import GARBAGE_BYTES, GARBAGE_KEPT

    flood = [("mailrun.mail.inbound.x", f"decode_error: {i}", b"\xc1" * 100_000) for i in range(30)]
    for _ in range(5):
        await inbox.store([], flood)
    await inbox.store([], [("other", "decode_error: once", b"\xc1")])
    rows = await query(
        inbox,
        "SELECT source, count(*), max(length(data)), max(reason) FROM dead_letter"
        " GROUP BY source ORDER BY source",
    )
    assert rows == [
        ("mailrun.mail.inbound.x", GARBAGE_KEPT, GARBAGE_BYTES, "decode_error: 9"),
        ("other", 1, 1, "decode_error: once"),
    ]


@pytest.mark.slow  # 60 MB of bodies through a real inbox file
@pytest.mark.anyio
async def test_the_file_gives_back_what_applied_bodies_took(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    inbox = await Inbox.open(path)
    try:
        for round_ in range(2):
            batch = [
                Envelope(dispatch_id=new_id("dsp"), run_id="run_a", seq=100 * round_ + s,
                         body=os.urandom(300_000))
                for s in range(1, 101)
            ]  # fmt: skip
            await inbox.store(batch)
            events = [processed(e) for e in batch]
            await inbox.commit(
                Commit(run_id="run_a", status="running", consumed=consumed(batch), events=events)
            )
            await inbox.mark_acked(events)
            await query(inbox, "PRAGMA wal_checkpoint(TRUNCATE)")
            # 30 MB went through; what stays is the rows and the free pages kept.
            assert path.stat().st_size < FREE_BYTES_KEPT + 1_000_000
    finally:
        await inbox.aclose()


@pytest.mark.anyio
async def test_applied_rows_far_behind_the_position_go_and_their_late_copies_stay_duplicates(
    two_kept: Inbox,
) -> None:
    inbox = two_kept
    events = await process(inbox, range(1, 6))
    await inbox.mark_acked(events)
    assert await bodies(inbox) == {4: False, 5: False}  # 1..3: more than 2 behind
    # A late copy of a deleted row: done here all the same, nothing stored.
    first = Envelope(dispatch_id=str(settled_dispatch(events[0])), run_id="run_a", seq=1)
    assert await inbox.store([first, env(6)]) == [False, True]
    assert await bodies(inbox) == {4: False, 5: False, 6: True}


@pytest.mark.anyio
async def test_applied_rows_go_as_the_position_leaves_them_behind_over_many_acks(
    two_kept: Inbox,
) -> None:
    inbox = two_kept
    first = await process(inbox, range(1, 4))
    await inbox.mark_acked(first)
    assert await bodies(inbox) == {2: False, 3: False}
    later = await process(inbox, range(4, 7))
    # Only seq 6's event acknowledged: 2 and 3 are left behind now, and go;
    # 4 and 5 wait for their acks, bodies and all.
    await inbox.mark_acked(later[2:])
    assert await bodies(inbox) == {4: True, 5: True, 6: False}
    await inbox.mark_acked(later[:2])
    assert await bodies(inbox) == {5: False, 6: False}
    # Rows the hub's floor compacted are swept once the position leaves them.
    await inbox.store([env(s) for s in range(7, 10)])
    assert await inbox.raise_floor(9) == 3
    tail = await process(inbox, range(10, 12))
    await inbox.mark_acked(tail)
    assert await bodies(inbox) == {10: False, 11: False}


@pytest.mark.anyio
async def test_rows_left_behind_gather_to_a_sixteenth_of_those_kept_before_a_sweep(
    tmp_path: Path,
) -> None:
    # 32 done rows kept: the compacted rows the position leaves behind go
    # two at a time, not in a statement every lone mail.
    inbox = await Inbox.open(tmp_path / "inbox.db", done_kept=32)
    sweeps: list[str] = []

    def traced(sql: str) -> None:
        if sql.startswith("DELETE FROM inbox WHERE state = 'done' AND seq >"):
            sweeps.append(sql)

    try:
        await inbox.db.read(lambda conn: conn.set_trace_callback(traced))
        for seq in range(1, 61):
            await inbox.mark_acked(await process(inbox, range(seq, seq + 1)))
            kept = await bodies(inbox)
            assert not any(kept.values())  # each compacted by its ack
            assert min(seq, 32) <= len(kept) <= min(seq, 33), seq
        assert len(sweeps) == len(range(34, 61, 2))
        assert sorted(await bodies(inbox)) == list(range(29, 61))
    finally:
        await inbox.aclose()


@pytest.mark.anyio
async def test_rows_compacted_after_an_adoption_moved_the_position_back_are_swept(
    two_kept: Inbox,
) -> None:
    inbox = two_kept
    await inbox.mark_acked(await process(inbox, range(1, 11)))
    assert await bodies(inbox) == {9: False, 10: False}
    await inbox.set_meta(ADOPT_MARK, 1)
    snapshot = RunSnapshot(run_id="run_a", status="running", state={}, last_seq=4)
    await inbox.adopt([snapshot], floor=4)
    assert inbox.last_seq == 4
    # Compacted while the position is low again, swept once it has passed them.
    await inbox.mark_acked(await process(inbox, range(5, 7)))
    assert await bodies(inbox) == {5: False, 6: False, 9: False, 10: False}
    await inbox.mark_acked(await process(inbox, range(7, 9)))
    assert inbox.last_seq == 10
    assert await bodies(inbox) == {9: False, 10: False}


@pytest.mark.anyio
async def test_a_commit_of_a_run_its_parents_end_cancelled_is_refused_and_only_its_looks(
    inbox: Inbox,
) -> None:
    first, later = env(2, "run_c"), env(4, "run_c")
    parent, other = env(1, "run_p"), env(3, "run_o")
    await inbox.store([parent, first, other, later])
    child = Commit(run_id="run_c", status="running", consumed=consumed([first]))
    child.parent_run_id = "run_p"
    await inbox.commit(child)
    seen: list[str] = []
    await inbox.db.read(lambda conn: conn.set_trace_callback(seen.append))
    try:
        await inbox.commit(Commit(run_id="run_o", status="running", consumed=consumed([other])))
        assert seen and not [s for s in seen if s.startswith("SELECT status FROM run")]
        # The parent ends: its live child is cancelled in the same commit.
        await inbox.commit(Commit(run_id="run_p", status="completed", consumed=consumed([parent])))
        assert inbox.take_cancelled() == ["run_c"]
        seen.clear()
        # The child's actor still holds "running": its commit would undo the cancel.
        with pytest.raises(InboxConflict):
            await inbox.commit(Commit(run_id="run_c", status="running", consumed=consumed([later])))
        assert [s for s in seen if s.startswith("SELECT status FROM run")]
    finally:
        await inbox.db.read(lambda conn: conn.set_trace_callback(None))
    assert await query(inbox, "SELECT status FROM run WHERE run_id = 'run_c'") == [("cancelled",)]
    assert await query(inbox, "SELECT state FROM inbox WHERE seq = 4") == [("pending",)]


@pytest.mark.anyio
async def test_a_lone_mail_is_found_and_committed_without_walking_the_seqs(inbox: Inbox) -> None:
    walks = r"^SELECT (1|seq) FROM inbox WHERE state"
    seen: list[str] = []
    await inbox.db.read(lambda conn: conn.set_trace_callback(seen.append))
    try:
        for seq in range(1, 5):
            e = env(seq, f"run_{seq}")
            await inbox.store([e])
            (p,) = await inbox.next_batch(64)
            assert p.dispatch_id == e.dispatch_id
            await inbox.commit(Commit(run_id=p.run_id, status="running", consumed=consumed([e])))
            assert inbox.last_seq == seq
            if seq == 1:  # the first search after the open walks
                assert [s for s in seen if re.match(walks, s)]
                seen.clear()
        assert seen and not [s for s in seen if re.match(walks, s)]
        # One that comes after a gap: the walk again, and it waits for the gap.
        await inbox.store([env(7, "run_7")])
        assert await inbox.next_batch(64) == []
        assert [s for s in seen if re.match(walks, s)]
        await inbox.store([env(5, "run_5"), env(6, "run_6")])
        assert [p.seq for p in await inbox.next_batch(64)] == [5]
    finally:
        await inbox.db.read(lambda conn: conn.set_trace_callback(None))
    assert await query(inbox, "SELECT value FROM meta WHERE key = 'last_seq'") == [(4,)]


@pytest.mark.anyio
async def test_an_ack_deletes_by_seq_only_when_it_settles_a_row_past_those_kept(
    two_kept: Inbox,
) -> None:
    inbox = two_kept
    forgets: list[str] = []

    def traced(sql: str) -> None:
        if sql.startswith("DELETE FROM inbox WHERE +state = 'done' AND +seq <="):
            forgets.append(sql)

    await inbox.db.read(lambda conn: conn.set_trace_callback(traced))
    # Lone mails, each acknowledged before the next: every row it settles
    # is among those kept, compacted; no statement looks for rows to delete.
    for seq in range(1, 6):
        await inbox.mark_acked(await process(inbox, range(seq, seq + 1)))
    assert forgets == []
    assert await bodies(inbox) == {4: False, 5: False}
    # An ack that comes late settles rows already past the kept ones: they go.
    late = await process(inbox, range(6, 10))
    await inbox.mark_acked(late)
    assert len(forgets) == 1
    assert await bodies(inbox) == {8: False, 9: False}
    # An event that names no seq may settle any row: the statement runs.
    quarantined = outgoing(
        EnvelopeQuarantined(event_id=new_id("evt"), run_id="run_a", dispatch_id=new_id("dsp"))
    )
    await inbox.mark_acked([quarantined])
    assert len(forgets) == 2
    await inbox.db.read(lambda conn: conn.set_trace_callback(None))


@pytest.mark.anyio
async def test_an_operation_of_a_cancelled_caller_writes_nothing_and_keeps_the_acks_held(
    inbox: Inbox,
) -> None:
    events = await process(inbox, range(1, 2))
    inbox.hold_acked(events)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await inbox.store([env(2)])
    assert scope.cancelled_caught
    assert await bodies(inbox) == {1: True}  # 2 not stored, 1 not compacted
    assert inbox.acks_held
    await inbox.write_acked()
    assert await bodies(inbox) == {1: False}
