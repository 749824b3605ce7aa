"""Old or damaged entries in a sidecar's inbox: decoded, or quarantined visibly, never wedging."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest

from runtime import DispatchProcessed, EnvelopeQuarantined, RunFailed
from runtime.sqlite import Database
from sidecar import Inbox
from sidecar.storage import Envelope, encode_envelope
from sidecar.storage._schema import SCHEMA_VERSION, migrate, schema_version
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    RECORDER,
    Deployment,
    deployed_sidecar,
    mail,
    make_deployment,
    v1_envelope,
    v1_inbox,
)

pytestmark = pytest.mark.anyio


def gated(gate: Path) -> str:
    """The sidecar fakes' recorder, holding every item until ``gate`` exists."""
    wait = (
        "async def main(ctx, item):\n"
        f"    while not __import__('os').path.exists({str(gate)!r}):\n"
        "        await anyio.sleep(0.01)\n"
    )
    return RECORDER.replace("async def main(ctx, item):\n", wait)


def subjects(events: list[DispatchProcessed]) -> list[str]:
    latest = max(events, key=lambda e: (e.at, len(e.state.get("seen", []))))
    return [s["subject"] for s in latest.state["seen"]]


def insert_rows(dep: Deployment, rows: list[tuple[str, bytes, int]]) -> None:
    """Pending rows straight into a (migrated) inbox: ``(dispatch_id, envelope, seq)``."""
    db = sqlite3.connect(dep.inbox_file)
    db.executemany(
        "INSERT INTO inbox (dispatch_id, envelope, state, run_id, seq)"
        " VALUES (?, ?, 'pending', ?, ?)",
        [(d, data, dep.address, seq) for d, data, seq in rows],
    )
    db.commit()
    db.close()


async def test_release_1_rows_that_learn_their_seq_while_processed_do_not_hold_back_later_ones(
    tmp_path: Path,
) -> None:
    # Two v1 envelopes are in the handler (one batch, no seq) when the hub
    # delivers them again with seqs 2 and 3; mail 4 must still come next.
    gate = tmp_path / "gate"
    dep = make_deployment(tmp_path, source=gated(gate), version=1)
    first, second = v1_envelope(dep, "one"), v1_envelope(dep, "two")
    v1_inbox(dep, [(first, "pending"), (second, "pending")], state={"seen": []})
    async with deployed_sidecar(dep, floor_seq=1) as (hub, _):
        for seq, envelope in ((2, first), (3, second)):
            again = mail(dep, seq, envelope["subject"], dispatch_id=envelope["dispatch_id"])
            assert (await hub.deliver(again)).result == "duplicate"
        assert (await hub.deliver(mail(dep, 4, "four"))).result == "stored"
        gate.touch()
        await hub.wait_events(DispatchProcessed, 3)
    assert subjects(hub.of_kind(DispatchProcessed)) == ["one", "two", "four"]
    assert dep.query("SELECT value FROM meta WHERE key = 'last_seq'") == [(4,)]


async def test_release_1_rows_processed_before_the_hub_said_their_seqs_do_not_leave_a_gap(
    tmp_path: Path,
) -> None:
    # The v1 envelopes (seqs 2 and 3 at the hub) are processed before the hub
    # delivers anything, and the hub applies their events: it never sends
    # them again, so they never learn their seqs. Mail 4 must come next all
    # the same: the EventsAck's floor (3) closes the gap.
    dep = make_deployment(tmp_path, version=1)
    first, second = v1_envelope(dep, "one"), v1_envelope(dep, "two")
    v1_inbox(dep, [(first, "pending"), (second, "pending")], state={"seen": []})
    async with deployed_sidecar(dep, floor_seq=1, events_floor=3) as (hub, _):
        await hub.wait_events(DispatchProcessed, 2)
        await wait_for(lambda: not dep.query("SELECT 1 FROM outbox WHERE acked = 0"))
        assert (await hub.deliver(mail(dep, 4, "four"))).result == "stored"
        await hub.wait_events(DispatchProcessed, 3)
    assert subjects(hub.of_kind(DispatchProcessed)) == ["one", "two", "four"]
    assert dep.query("SELECT value FROM meta WHERE key = 'last_seq'") == [(4,)]


async def test_an_unreadable_stored_envelope_is_quarantined_and_later_seqs_go_on(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    inbox = await Inbox.open(dep.inbox_file)
    await inbox.aclose()

    def envelope(dispatch_id: str, seq: int) -> bytes:
        return encode_envelope(
            Envelope(
                dispatch_id=dispatch_id,
                deployment_id=dep.id,
                run_id=dep.address,
                address=dep.address,
                seq=seq,
                subject=dispatch_id,
                body=b"",
            )
        )

    insert_rows(
        dep,
        [
            ("dsp_a", envelope("dsp_a", 1), 1),
            ("dsp_bad", b"\xc1 damaged", 2),
            ("dsp_c", envelope("dsp_c", 3), 3),
        ],
    )
    async with deployed_sidecar(dep) as (hub, _):
        await hub.wait_events(DispatchProcessed, 2)
        await hub.wait_events(EnvelopeQuarantined, 1)
    (quarantined,) = hub.of_kind(EnvelopeQuarantined)
    assert (quarantined.dispatch_id, quarantined.run_id) == ("dsp_bad", dep.address)
    assert quarantined.reason.startswith("unreadable inbox envelope")
    assert sorted(e.seq for e in hub.of_kind(DispatchProcessed)) == [1, 3]
    assert subjects(hub.of_kind(DispatchProcessed)) == ["dsp_a", "dsp_c"]
    assert dep.query("SELECT dispatch_id, outcome FROM inbox ORDER BY seq") == [
        ("dsp_a", "processed"),
        ("dsp_bad", "dead_letter"),
        ("dsp_c", "processed"),
    ]
    assert dep.query("SELECT data FROM dead_letter") == [(b"\xc1 damaged",)]


async def test_damaged_release_1_envelopes_are_reported_to_the_hub_at_the_upgrade(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path, version=1)
    ok, mistyped, truncated = (v1_envelope(dep, s) for s in ("ok", "mistyped", "truncated"))
    mistyped["body"] = 12  # a map, but not an envelope: its address still names the run
    v1_inbox(dep, [(ok, "pending"), (mistyped, "pending"), (truncated, "pending")])
    db = sqlite3.connect(dep.inbox_file)
    raw = msgspec.msgpack.encode(truncated)
    db.execute(
        "UPDATE inbox SET envelope = ? WHERE dispatch_id = ?", (raw[:20], truncated["dispatch_id"])
    )
    db.commit()
    db.close()
    async with deployed_sidecar(dep) as (hub, _):
        await hub.wait_events(EnvelopeQuarantined, 2)
        await hub.wait_events(DispatchProcessed, 1)
    runs = {e.dispatch_id: e.run_id for e in hub.of_kind(EnvelopeQuarantined)}
    assert runs == {mistyped["dispatch_id"]: dep.address, truncated["dispatch_id"]: ""}
    assert hub.of_kind(DispatchProcessed)[0].dispatch_id == ok["dispatch_id"]
    assert sorted(r[0] for r in dep.query("SELECT source FROM dead_letter")) == sorted(
        f"inbox:{e['dispatch_id']}" for e in (mistyped, truncated)
    )


async def test_an_unreadable_run_state_fails_the_run_visibly_and_keeps_its_bytes(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path, version=1)
    v1_inbox(dep, [(v1_envelope(dep, "first"), "pending")])
    db = sqlite3.connect(dep.inbox_file)
    db.execute("INSERT INTO run_state VALUES (?, ?)", (dep.address, b"\xc1 not a state"))
    db.commit()
    db.close()
    async with deployed_sidecar(dep) as (hub, _):
        await hub.wait_events(RunFailed, 1)
        assert (await hub.deliver(mail(dep, 1, "later", run_id=dep.address))).result == "stored"
        await hub.wait_events(DispatchProcessed, 2)
    assert "unreadable run state" in hub.of_kind(RunFailed)[0].error
    outcomes = sorted(e.outcome for e in hub.of_kind(DispatchProcessed))
    assert outcomes == ["failed", "refused_terminal"]
    assert dep.query("SELECT state FROM run_state") == [(b"\xc1 not a state",)]
    assert dep.query("SELECT status FROM run") == [("failed",)]


async def test_acknowledged_rows_an_older_release_kept_go_at_the_open(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    inbox = await Inbox.open(path)
    await inbox.aclose()
    db = sqlite3.connect(path)
    db.executemany(
        "INSERT INTO outbox (event_id, run_id, kind, frame, acked)"
        " VALUES (?, 'run_x', 'k', x'00', ?)",
        [("evt_acked", 1), ("evt_open", 0)],
    )
    db.commit()
    db.close()
    inbox = await Inbox.open(path)
    await inbox.aclose()
    db = sqlite3.connect(path)
    left = [row[0] for row in db.execute("SELECT event_id FROM outbox ORDER BY pos")]
    db.close()
    assert left == ["evt_open"]


async def test_the_schema_check_of_an_inbox_at_this_release_is_one_read(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    inbox = await Inbox.open(path)
    await inbox.aclose()
    db = await Database.open(path)
    statements: list[str] = []
    await db.read(lambda conn: conn.set_trace_callback(statements.append))
    try:
        assert await migrate(db) == SCHEMA_VERSION
    finally:
        await db.read(lambda conn: conn.set_trace_callback(None))
        await db.aclose()
    assert statements == ["SELECT MAX(version) FROM schema_version"]


async def test_a_new_inbox_is_migrated_from_nothing(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "inbox.db")
    try:
        assert await migrate(db) == 0
        assert await db.read(schema_version) == SCHEMA_VERSION
    finally:
        await db.aclose()
