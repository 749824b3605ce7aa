"""Release 1 state dirs: a v1 inbox is read, migrated in place and carried on."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest

from runtime import DispatchProcessed, RunStarted
from runtime.testing import MemoryBus
from sidecar import Inbox
from sidecar.storage import SCHEMA_VERSION
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    deployed_sidecar,
    fake_hub,
    mail,
    make_deployment,
    running_sidecar,
    v1_envelope,
    v1_inbox,
)


def run_state(dep: object) -> dict[str, object]:
    rows = dep.query("SELECT state FROM run_state")  # type: ignore[attr-defined]
    assert len(rows) == 1
    state: dict[str, object] = msgspec.msgpack.decode(rows[0][0])
    return state


@pytest.mark.anyio
async def test_a_pending_v1_envelope_is_processed_once_in_its_run_with_its_state(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path, version=1)
    done, pending = v1_envelope(dep, "old"), v1_envelope(dep, "waiting", b"v1 body")
    v1_inbox(dep, [(done, "done"), (pending, "pending")], state={"seen": [{"subject": "old"}]})
    bus = MemoryBus()
    async with fake_hub(bus, dep) as hub:
        async with running_sidecar(bus, dep):
            await hub.wait_events(DispatchProcessed, 1)
        async with running_sidecar(bus, dep):  # and again: nothing more to do
            await wait_for(
                lambda: dep.query("SELECT count(*) FROM outbox WHERE acked = 0") == [(0,)]
            )
    (event,) = hub.of_kind(DispatchProcessed)
    assert (event.dispatch_id, event.run_id, event.seq) == (
        pending["dispatch_id"],
        dep.address,
        None,
    )
    assert [s["subject"] for s in event.state["seen"]] == ["old", "waiting"]
    assert event.state["seen"][1]["text"] == "v1 body"
    assert hub.of_kind(RunStarted) == []  # the run started under release 1
    assert run_state(dep) == event.state
    assert dep.query("SELECT run_id, state, outcome FROM inbox ORDER BY rowid") == [
        (dep.address, "done", None),
        (dep.address, "done", "processed"),
    ]


@pytest.mark.anyio
async def test_the_v1_migration_is_idempotent_and_keeps_release_1_columns(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path, version=1)
    v1_inbox(dep, [(v1_envelope(dep, "a"), "pending")], state={"n": 1})
    for _ in range(2):
        inbox = await Inbox.open(dep.inbox_file)
        await inbox.aclose()
    assert dep.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert dep.query("SELECT run_id, status FROM run") == [(dep.address, "running")]
    assert dep.query("SELECT value FROM meta WHERE key = 'last_seq'") == [(0,)]
    # Release 1's columns are intact: its own reader would still find its rows.
    db = sqlite3.connect(dep.inbox_file)
    ((envelope, state),) = db.execute("SELECT envelope, state FROM inbox").fetchall()
    db.close()
    assert msgspec.msgpack.decode(envelope)["subject"] == "a"
    assert state == "pending"


@pytest.mark.anyio
async def test_an_unreadable_v1_envelope_is_dead_lettered_not_wedging(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, version=1)
    v1_inbox(dep, [])
    db = sqlite3.connect(dep.inbox_file)
    db.execute("INSERT INTO inbox VALUES ('dsp_broken', x'c1c1', 'pending')")
    db.commit()
    db.close()
    inbox = await Inbox.open(dep.inbox_file)
    try:
        assert await inbox.next_batch(10) == []
    finally:
        await inbox.aclose()
    assert dep.query("SELECT state, outcome FROM inbox") == [("done", "dead_letter")]
    assert dep.query("SELECT source, data FROM dead_letter") == [("inbox:dsp_broken", b"\xc1\xc1")]


@pytest.mark.anyio
async def test_after_an_upgrade_the_welcome_floor_and_learned_seqs_keep_order(
    tmp_path: Path,
) -> None:
    # Release 1 processed one mail and stored a second; the migrated hub gave
    # them seqs 1 and 2 and settled seq 1. New mail then comes as seq 3.
    dep = make_deployment(tmp_path, version=1)
    done, pending = v1_envelope(dep, "one"), v1_envelope(dep, "two")
    v1_inbox(dep, [(done, "done"), (pending, "pending")], state={"seen": [{"subject": "one"}]})
    async with deployed_sidecar(dep, floor_seq=1) as (hub, _):
        await hub.wait_events(DispatchProcessed, 1)
        # The hub delivers seq 2 again (the new owner may lack it): a duplicate
        # that teaches the stored row its seq, so seq 3 is next.
        again = mail(dep, 2, "two", dispatch_id=pending["dispatch_id"], run_id=dep.address)
        assert (await hub.deliver(again)).result == "duplicate"
        assert (await hub.deliver(mail(dep, 3, "three", run_id=dep.address))).result == "stored"
        await hub.wait_events(DispatchProcessed, 2)
    latest = max(hub.of_kind(DispatchProcessed), key=lambda e: e.at)
    assert [s["subject"] for s in latest.state["seen"]] == ["one", "two", "three"]
    assert dep.query("SELECT value FROM meta WHERE key = 'last_seq'") == [(3,)]


@pytest.mark.anyio
async def test_without_a_floor_a_lagging_inbox_waits_and_with_one_it_moves_on(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    async with fake_hub(bus, dep) as hub:
        async with running_sidecar(bus, dep) as car:
            assert (await hub.deliver(mail(dep, 5, "five"))).result == "stored"
            assert car.runs is not None
            await car.runs.idle.wait()
            assert hub.of_kind(DispatchProcessed) == []
        hub.floor_seq = 4  # the hub settled 1..4 elsewhere
        async with running_sidecar(bus, dep):
            await hub.wait_events(DispatchProcessed, 1)
    assert hub.of_kind(DispatchProcessed)[0].seq == 5
