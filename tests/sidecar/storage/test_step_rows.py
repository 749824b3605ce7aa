"""The inbox's recorded steps on a real file: migration 6, a record and its
event in one transaction, their lifetime (gone at consumption, a parked
dispatch's successes kept, a resume's failures dropped, an ended run's all
gone, a takeover's replaced), and no statement about them while there are none."""

from __future__ import annotations

import re
import sqlite3
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runtime import RunSnapshot, new_id
from runtime.sqlite import Database
from runtime.wire import StepRecorded
from sidecar import Inbox
from sidecar.storage import SCHEMA_VERSION, Commit, Envelope
from sidecar.storage._schema import MIGRATIONS

pytestmark = pytest.mark.anyio

LEGACY = Path(__file__).resolve().parents[2] / "legacy"
RELEASE_2 = LEGACY / "release2-state.tar.gz"
RELEASE_3 = LEGACY / "release3-state.tar.gz"


@pytest.fixture
async def inbox(tmp_path: Path) -> AsyncIterator[Inbox]:
    box = await Inbox.open(tmp_path / "inbox.db")
    try:
        yield box
    finally:
        await box.aclose()


def step(dispatch_id: str, name: str, result: Any = None, error: str | None = None) -> StepRecorded:
    return StepRecorded(
        event_id=new_id("evt"),
        run_id="run_a",
        at=1.0,
        dispatch_id=dispatch_id,
        name=name,
        index=1,
        result=result,
        error=error,
        attempts=1,
    )


async def query(inbox: Inbox, sql: str, *params: object) -> list[tuple[Any, ...]]:
    return await inbox.db.read(lambda conn: [tuple(r) for r in conn.execute(sql, params)])


async def stored(inbox: Inbox, *seqs: int) -> list[Envelope]:
    envelopes = [Envelope(dispatch_id=new_id("dsp"), run_id="run_a", seq=s) for s in seqs]
    await inbox.store(envelopes)
    return envelopes


def open_file(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


async def test_an_inbox_of_the_current_release_migrates_to_6_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "inbox.db"
    box = await Inbox.open(path)
    (e,) = await stored(box, 1)
    await box.aclose()
    # The file as release 5 leaves it: migration 6 only adds the step table.
    conn = open_file(path)
    conn.execute("DROP TABLE step")
    conn.execute("UPDATE schema_version SET version = 5")
    conn.close()
    box = await Inbox.open(path)
    try:
        assert await query(box, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
        assert SCHEMA_VERSION == 6
        assert await query(box, "SELECT dispatch_id FROM inbox") == [(e.dispatch_id,)]
        await box.record_step(step(e.dispatch_id, "charge", {"id": 1}))
        got = await box.steps_of(e.dispatch_id)
        assert (got["charge"].result, got["charge"].error) == ({"id": 1}, None)
    finally:
        await box.aclose()
    # Each step can run again on what it made.
    db = await Database.open(path)
    try:
        await db.transact(MIGRATIONS[5])
        assert await db.read(
            lambda c: tuple(c.execute("SELECT COUNT(*) FROM step").fetchone())
        ) == (1,)
    finally:
        await db.aclose()


@pytest.mark.parametrize("release", [RELEASE_2, RELEASE_3], ids=["release-2", "release-3"])
async def test_an_inbox_a_previous_release_left_migrates_to_6(
    tmp_path: Path, release: Path
) -> None:
    """Release 3's inbox is at schema 5 (the release before steps), release 2's at 4."""
    with tarfile.open(release) as archive:
        (member,) = [m for m in archive.getmembers() if m.name.endswith("inbox.db")]
        archive.extract(member, tmp_path, filter="data")
    path = tmp_path / member.name
    conn = open_file(path)
    (before,) = conn.execute("SELECT version FROM schema_version").fetchone()
    (rows,) = conn.execute("SELECT COUNT(*) FROM inbox").fetchone()
    conn.close()
    assert before == (5 if release is RELEASE_3 else 4) and rows > 0
    box = await Inbox.open(path)
    try:
        assert await query(box, "SELECT version FROM schema_version") == [(6,)]
        assert await query(box, "SELECT COUNT(*) FROM inbox") == [(rows,)]
        assert await query(box, "SELECT COUNT(*) FROM step") == [(0,)]
        (dispatch_id,) = (await query(box, "SELECT dispatch_id FROM inbox LIMIT 1"))[0]
        await box.record_step(step(dispatch_id, "charge", {"id": 2}))
        assert list(await box.steps_of(dispatch_id)) == ["charge"]
    finally:
        await box.aclose()


async def test_a_record_and_its_event_are_one_transaction(inbox: Inbox) -> None:
    (e,) = await stored(inbox, 1)
    first = step(e.dispatch_id, "charge", {"receipt": 7})
    await inbox.record_step(first)
    assert await query(inbox, "SELECT name, result, error FROM step") == [
        ("charge", b'{"receipt":7}', None)
    ]
    [(_, event)] = await inbox.unacked(10)
    assert (event.event_id, event.kind) == (first.event_id, "StepRecorded")
    got = await inbox.steps_of(e.dispatch_id)
    assert (got["charge"].result, got["charge"].error) == ({"receipt": 7}, None)
    # An event the outbox refuses (its id is there already) takes its row with it.
    again = step(e.dispatch_id, "other", 1)
    again = StepRecorded(**{**{f: getattr(again, f) for f in again.__struct_fields__},
                            "event_id": first.event_id})  # fmt: skip
    with pytest.raises(sqlite3.IntegrityError):
        await inbox.record_step(again)
    assert await query(inbox, "SELECT name FROM step") == [("charge",)]


async def test_steps_go_with_the_commit_that_consumes_their_dispatch(inbox: Inbox) -> None:
    done, parked, failing = await stored(inbox, 1, 2, 3)
    for e in (done, parked, failing):
        await inbox.record_step(step(e.dispatch_id, "ok", 1))
        await inbox.record_step(step(e.dispatch_id, "bad", error="ValueError: no"))
    # A failed attempt consumes nothing: its steps stay for the retry.
    await inbox.commit(
        Commit(run_id="run_a", status="running", consumed=[], attempt=(done.dispatch_id, "E"))
    )
    assert len(await inbox.steps_of(done.dispatch_id)) == 2
    await inbox.commit(
        Commit(
            run_id="run_a",
            status="running",
            consumed=[(done.dispatch_id, 1, "processed"), (parked.dispatch_id, 2, "parked")],
        )
    )
    rows = await query(inbox, "SELECT dispatch_id, name FROM step ORDER BY dispatch_id, name")
    assert sorted(rows) == sorted(
        [(parked.dispatch_id, "ok"), (failing.dispatch_id, "bad"), (failing.dispatch_id, "ok")]
    )
    assert await inbox.steps_of(done.dispatch_id) == {}
    # A run that ends: none of its dispatches is processed again.
    await inbox.commit(
        Commit(run_id="run_a", status="failed", consumed=[(failing.dispatch_id, 3, "failed")])
    )
    assert await query(inbox, "SELECT COUNT(*) FROM step") == [(0,)]


async def test_a_resume_drops_the_failed_steps_of_what_its_run_held(inbox: Inbox) -> None:
    failing, later, resume = await stored(inbox, 1, 2, 3)
    await inbox.record_step(step(failing.dispatch_id, "ok", 1))
    await inbox.record_step(step(failing.dispatch_id, "bad", error="ValueError: no"))
    await inbox.commit(
        Commit(
            run_id="run_a",
            status="suspended",
            consumed=[],
            held=[(failing.dispatch_id, 1), (later.dispatch_id, 2)],
        )
    )
    assert len(await inbox.steps_of(failing.dispatch_id)) == 2
    await inbox.commit(
        Commit(
            run_id="run_a",
            status="running",
            consumed=[(resume.dispatch_id, 3, "processed")],
            resumed=1,
        )
    )
    assert list(await inbox.steps_of(failing.dispatch_id)) == ["ok"]


async def test_a_takeover_replaces_the_steps_with_the_hubs(inbox: Inbox) -> None:
    mine, open_ = await stored(inbox, 1, 2)
    await inbox.record_step(step(mine.dispatch_id, "ok", 1))
    hubs = step(open_.dispatch_id, "charge", {"receipt": 9})
    run = RunSnapshot(run_id="run_a", status="running", state={}, last_seq=0, steps=[hubs])
    await inbox.adopt([run], floor=0)
    assert await inbox.steps_of(mine.dispatch_id) == {}
    got = await inbox.steps_of(open_.dispatch_id)
    assert got["charge"].result == {"receipt": 9}


async def test_without_steps_no_statement_looks_for_them(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    box = await Inbox.open(path)
    try:
        (e,) = await stored(box, 1)
        seen: list[str] = []
        await box.db.read(lambda conn: conn.set_trace_callback(seen.append))
        assert await box.steps_of(e.dispatch_id) == {}
        await box.commit(
            Commit(run_id="run_a", status="completed", consumed=[(e.dispatch_id, 1, "processed")])
        )
        assert seen and not [s for s in seen if re.search(r"\bstep\b", s)]
        # Once one is recorded, the commit that consumes its dispatch drops it.
        (f,) = await stored(box, 2)
        await box.record_step(step(f.dispatch_id, "ok", 1))
        seen.clear()
        await box.commit(
            Commit(run_id="run_b", status="running", consumed=[(f.dispatch_id, 2, "processed")])
        )
        assert [s for s in seen if s.startswith("DELETE FROM step")]
        assert await query(box, "SELECT COUNT(*) FROM step") == [(0,)]
    finally:
        await box.db.read(lambda conn: conn.set_trace_callback(None))
        await box.aclose()
