"""A sidecar's home (its state dir): each start a new incarnation of it, a copy
another home, a second process on it stopped, an earlier release's restore
record read and rewritten, and the hub's word on who owns it: an owner
conflict stops it, a takeover is asked for once and starts from the hub's
state. On an in-memory bus, against a scripted hub."""

from __future__ import annotations

import dataclasses
import shutil
import stat
from pathlib import Path

import anyio
import pytest

from runtime import (
    DispatchProcessed,
    RunSnapshot,
    read_restore_record,
)
from runtime.testing import MemoryBus
from sidecar import HomeLocked, Sidecar, SidecarOptions
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    bus_connect,
    deployed_sidecar,
    fake_hub,
    mail,
    make_deployment,
)


@pytest.mark.anyio
async def test_each_start_is_a_new_incarnation_of_the_same_home(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        assert car.link is not None and car.link.session is not None
        assert car.link.session.session_id == hub.welcomes[-1].session_id
        first = hub.hellos[-1]
        assert first.instance_id.startswith("ins_") and first.home.startswith("home_")
        # Nothing on disk names the process: a copy cannot pass for it.
        record, version = read_restore_record(dep.record_file)
        assert version == 2 and record.instance_id is None
        await wait_for(
            lambda: (
                read_restore_record(dep.record_file)[0].session_id == hub.welcomes[-1].session_id
            )
        )
    async with deployed_sidecar(dep) as (hub, _):
        again = hub.hellos[-1]
    assert again.instance_id != first.instance_id
    assert again.home == first.home


@pytest.mark.anyio
async def test_a_copy_of_the_state_dir_is_another_home(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "a")
    async with deployed_sidecar(dep) as (hub, _):
        original = hub.hellos[-1].home
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copy = dataclasses.replace(dep, state_dir=tmp_path / "b")
    async with deployed_sidecar(copy) as (hub, _):
        assert hub.hellos[-1].home != original


@pytest.mark.anyio
async def test_a_second_process_on_the_same_state_dir_stops(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        second = Sidecar(SidecarOptions(state_dir=dep.state_dir, deployment_id=dep.id))
        with anyio.fail_after(5), pytest.raises(HomeLocked):
            await second.run()
        assert len(hub.hellos) == 2, "the second process never said hello"
        assert second.inbox is None, "nor opened the inbox"


@pytest.mark.anyio
async def test_boots_from_a_v1_record_and_rewrites_it_as_v2_0600(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, version=1)
    assert read_restore_record(dep.record_file)[1] == 1
    async with deployed_sidecar(dep) as (hub, _):
        # The hub verified the hello signature with the key from the v1 record.
        assert hub.welcomes
    record, version = read_restore_record(dep.record_file)
    assert version == 2
    assert record.hub_key.seed == dep.seed
    assert record.public_key == dep.public_key
    assert record.instance_id is None
    assert stat.S_IMODE(dep.record_file.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_owner_conflict_stops_the_sidecar_with_a_clear_error(tmp_path: Path) -> None:
    import anyio

    from sidecar import OwnerConflict, Sidecar, SidecarOptions

    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    async with fake_hub(bus, dep, refuse_hello="owner_conflict"):
        car = Sidecar(
            SidecarOptions(state_dir=tmp_path, deployment_id=dep.id),
            connect=bus_connect(bus),
        )
        with anyio.fail_after(5), pytest.raises(OwnerConflict):
            await car.run()


@pytest.mark.anyio
async def test_takeover_is_asked_for_on_the_first_hello_only(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, takeover=True) as (hub, _):
        await hub.announce("boot_" + "2" * 26)
        await wait_for(lambda: len(hub.welcomes) == 2)
    signed = [h for h in hub.hellos if h.nonce is not None]
    assert [h.takeover for h in signed] == [True, False]


@pytest.mark.anyio
async def test_a_takeover_starts_from_the_hubs_state_even_after_a_failed_first_try(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    first, second, third = mail(dep, 1, "one"), mail(dep, 2, "two"), mail(dep, 3, "three")
    # This disk processed all three; the hub applied only the first (the
    # others' events never left: the hub refused them).
    async with deployed_sidecar(dep) as (hub, _):
        assert (await hub.deliver(first)).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
        hub.refuse_events = ["store_unavailable"] * 1000
        for frame in (second, third):
            assert (await hub.deliver(frame)).result == "stored"
        await wait_for(lambda: dep.query("SELECT count(*) FROM outbox WHERE acked = 0")[0][0] > 0)
    (applied,) = hub.of_kind(DispatchProcessed)
    run_id = applied.run_id
    stale = {row[0] for row in dep.query("SELECT event_id FROM outbox WHERE acked = 0")}
    # Taken over from another home: the first welcome says so, and its state
    # request fails; the second welcome does not say so, and it adopts anyway.
    snapshot = RunSnapshot(run_id=run_id, status="running", state=applied.state, last_seq=1)
    async with deployed_sidecar(
        dep, from_hub=1, refuse_state=1, states=[snapshot], floor_seq=1
    ) as (hub, car):
        assert len(hub.welcomes) == 2
        assert car.link is not None and car.link.session is not None
        assert car.link.session.session_id == hub.welcomes[1].session_id
        # The copy's unshipped events are gone (what is there now, if anything,
        # is the processing of seq 2 and 3 anew, from the hub's state).
        left = {row[0] for row in dep.query("SELECT event_id FROM outbox")}
        assert not stale & left
        for frame in (second, third):
            assert (await hub.deliver(frame)).result == "duplicate"
        await hub.wait_events(DispatchProcessed, 2)
        latest = max(hub.of_kind(DispatchProcessed), key=lambda e: e.seq or 0)
        assert [s["subject"] for s in latest.state["seen"]] == ["one", "two", "three"]
        # What this disk did that the hub never applied was dropped, not sent.
        assert stale and not stale & hub.events.keys()
