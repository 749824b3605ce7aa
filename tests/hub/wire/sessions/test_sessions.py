"""Hello handshake, ownership claims and epoch fencing on the hub's wire side."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hub.store import delete_deployment
from runtime import (
    Challenge,
    DispatchProcessed,
    EventsAck,
    FrameDecoder,
    Hello,
    HubBoot,
    RunEvents,
    RunStarted,
    Welcome,
    hello_message,
    new_id,
)
from runtime.wire import generate_keypair, sign
from tests.support.harnesses.wire import Sidecar, accept, deploy, refused, running_hub
from tests.support.store import execute


async def owner(hub: object, dep_id: str) -> tuple[str | None, int]:
    row = await hub.one(  # type: ignore[attr-defined]
        "SELECT owner_instance, owner_epoch FROM deployment WHERE id = ?", dep_id
    )
    return row["owner_instance"], row["owner_epoch"]


@pytest.mark.anyio
async def test_challenge_then_signed_hello_welcomes(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        car = Sidecar(hub, dep)
        welcome = await car.hello()
        assert isinstance(welcome, Welcome)
        assert welcome.owner_epoch == 1
        assert welcome.hub_boot_id == hub.boot_id
        assert welcome.session_id.startswith("ses_")
        assert await owner(hub, dep.id) == (car.instance_id, 1)
        assert hub.wire.health()["connected_sidecars"] == 1


@pytest.mark.anyio
async def test_bad_signature_and_wrong_key_are_refused(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        car = Sidecar(hub, dep)
        other_seed, other_public = generate_keypair()
        assert refused(await car.hello(seed=other_seed), "bad_signature")
        # A hello naming another key is refused even when signed by that key.
        challenge = await car.request(hub.subjects.hello, car._hello())
        assert isinstance(challenge, Challenge)
        signature = sign(other_seed, hello_message(challenge.nonce, dep.id, car.instance_id))
        forged = Hello(
            deployment_id=dep.id,
            instance_id=car.instance_id,
            public_key=other_public,
            nonce=challenge.nonce,
            signature=signature,
        )
        assert refused(await car.request(hub.subjects.hello, forged), "bad_signature")
        assert await owner(hub, dep.id) == (None, 0)


@pytest.mark.anyio
async def test_nonce_is_single_use(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        car = Sidecar(hub, dep)
        challenge = await car.request(hub.subjects.hello, car._hello())
        assert isinstance(challenge, Challenge)
        signed = car._hello(
            nonce=challenge.nonce,
            signature=sign(dep.seed, hello_message(challenge.nonce, dep.id, car.instance_id)),
        )
        assert isinstance(await car.request(hub.subjects.hello, signed), Welcome)
        assert refused(await car.request(hub.subjects.hello, signed), "bad_nonce")


@pytest.mark.anyio
async def test_unknown_and_deleted_deployments_are_refused(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        ghost = Sidecar(hub, dep)
        ghost.dep = type(dep)(new_id("dep"), dep.address, dep.seed, dep.public_key)
        assert refused(
            await ghost.request(hub.subjects.hello, ghost._hello()), "unknown_deployment"
        )
        assert await delete_deployment(hub.store, dep.id)
        car = Sidecar(hub, dep)
        assert refused(await car.request(hub.subjects.hello, car._hello()), "deployment_not_live")


@pytest.mark.anyio
async def test_second_instance_is_refused_while_another_owns(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        first, second = Sidecar(hub, dep), Sidecar(hub, dep)
        assert isinstance(await first.hello(), Welcome)
        assert refused(await second.hello(), "owner_conflict")
        assert await owner(hub, dep.id) == (first.instance_id, 1)


@pytest.mark.anyio
async def test_same_instance_rehello_keeps_epoch(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        car = Sidecar(hub, dep)
        first = await car.hello()
        again = await car.hello()
        assert isinstance(first, Welcome) and isinstance(again, Welcome)
        assert again.owner_epoch == first.owner_epoch == 1
        assert again.session_id != first.session_id
        # Frames sent under the earlier session of the same owner still count.
        frame = RunEvents(
            deployment_id=dep.id, session_id=first.session_id, owner_epoch=1, events=[]
        )
        assert isinstance(await car.request(hub.subjects.events, frame), EventsAck)


@pytest.mark.anyio
async def test_takeover_bumps_epoch_and_fences_the_old_owner(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        old, new = Sidecar(hub, dep), Sidecar(hub, dep)
        assert isinstance(await old.hello(), Welcome)
        taken = await new.hello(takeover=True)
        assert isinstance(taken, Welcome) and taken.owner_epoch == 2
        assert await owner(hub, dep.id) == (new.instance_id, 2)
        run_id = new_id("run")
        event = RunStarted(event_id=new_id("evt"), run_id=run_id)
        session_id, epoch = old.session
        stale = RunEvents(
            deployment_id=dep.id, session_id=session_id, owner_epoch=epoch, events=[event]
        )
        assert refused(await old.request(hub.subjects.events, stale), "stale_epoch")
        # Claiming the new epoch with the old session does not pass either.
        forged = RunEvents(
            deployment_id=dep.id, session_id=session_id, owner_epoch=2, events=[event]
        )
        assert refused(await old.request(hub.subjects.events, forged), "stale_epoch")
        # The fenced owner cannot win its deployment back without takeover.
        assert refused(await old.hello(), "owner_conflict")
        assert (await hub.one("SELECT COUNT(*) AS n FROM run_event"))["n"] == 0


@pytest.mark.anyio
async def test_unknown_session_and_foreign_deployment_are_refused(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        mine, theirs = await deploy(hub.store, "mine"), await deploy(hub.store, "theirs")
        car = Sidecar(hub, mine)
        assert isinstance(await car.hello(), Welcome)
        session_id, epoch = car.session
        event = DispatchProcessed(event_id=new_id("evt"), run_id="run_x", dispatch_id="dsp_x")
        unknown = RunEvents(session_id=new_id("ses"), owner_epoch=epoch, events=[event])
        assert refused(await car.request(hub.subjects.events, unknown), "unknown_session")
        foreign = RunEvents(
            deployment_id=theirs.id, session_id=session_id, owner_epoch=epoch, events=[event]
        )
        assert refused(await car.request(hub.subjects.events, foreign), "unknown_session")


@pytest.mark.anyio
async def test_hub_boot_is_announced_again_after_a_reconnect(tmp_path: Path) -> None:
    from runtime.testing import MemoryBus

    bus = MemoryBus()
    listener = bus.connect("listener")
    sub = await listener.subscribe("mailrun.hub.announce")
    decoder: FrameDecoder[HubBoot] = FrameDecoder(HubBoot)
    async with running_hub(tmp_path, bus=bus) as hub:
        seen = []
        with anyio.fail_after(5):
            async for message in sub:
                seen.append(decoder.decode(message.data))
                if len(seen) == 1:
                    await bus.disconnect(hub.transport)
                    await bus.reconnect(hub.transport)
                if len(seen) == 2:
                    break
        assert [boot.boot_id for boot in seen] == [hub.boot_id, hub.boot_id]
    await listener.aclose()


@pytest.mark.anyio
async def test_welcome_carries_the_floor_below_which_all_is_settled(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        car = Sidecar(hub, dep)
        fresh = await car.hello()
        assert isinstance(fresh, Welcome) and fresh.floor_seq == 0
        await accept(hub, dep, [b"1", b"2", b"3", b"4"])

        async def settle(seq: int, status: str) -> None:
            await execute(
                hub.store,
                "UPDATE workflow_run_dispatch SET status = ? WHERE deployment_id = ? AND seq = ?",
                status,
                dep.id,
                seq,
            )

        await settle(1, "processed")
        await settle(2, "cancelled")
        await settle(4, "processed")  # seq 3 is still open: the floor stops below it
        welcome = await car.hello()
        assert isinstance(welcome, Welcome) and welcome.floor_seq == 2
        await settle(3, "processed")
        welcome = await car.hello()
        assert isinstance(welcome, Welcome) and welcome.floor_seq == 4
