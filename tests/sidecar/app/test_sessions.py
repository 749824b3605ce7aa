"""A sidecar's session with the hub: events resent until acknowledged, hello
again on an unknown session, a new hub boot or a reconnect (not on a stale
refusal), the request in flight abandoned at a new boot, a deleted notice
obeyed only when the hub confirms it. On an in-memory bus, against a
scripted hub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import (
    DispatchProcessed,
    EventsAck,
    Fenced,
    FrameDecoder,
    Refused,
    RunEvents,
    encode,
    new_id,
)
from runtime.testing import MemoryBus
from sidecar import Sidecar, SidecarOptions
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    APPLIED,
    bus_connect,
    deployed_sidecar,
    fake_hub,
    mail,
    make_deployment,
    running_sidecar,
)


@pytest.mark.anyio
async def test_events_are_resent_until_acknowledged(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, request_timeout=0.2, drop_acks=1) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        # RunStarted + DispatchProcessed, both acknowledged in the end.
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)])
        # The first batch got no ack: it went again, and the hub saw it twice.
        assert hub.batches == 2
    assert len(hub.of_kind(DispatchProcessed)) == 1


@pytest.mark.anyio
async def test_unknown_session_on_events_makes_the_sidecar_say_hello_again(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, refuse_events=["unknown_session"]) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        # The resend may beat the new welcome (the fake takes it under the old
        # session): what matters is that the refusal brought a second hello.
        await wait_for(lambda: len(hub.welcomes) == 2, what="a second hello")
        await hub.wait_events(DispatchProcessed, 1)
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)], what="the events acknowledged")


@pytest.mark.anyio
async def test_a_refusal_of_a_frame_from_an_earlier_session_brings_no_hello(
    tmp_path: Path,
) -> None:
    # After a hub restart, events in flight to the old hub come back refused
    # just after the new session began: a hello for each replaced a session
    # that was fine (and cost a hub restart with 100 sidecars half a second).
    dep = make_deployment(tmp_path)
    refusals = ["unknown_session", "stale_epoch", "unknown_session", "unknown_session"]
    async with deployed_sidecar(dep, refuse_events=list(refusals)) as (_, car):
        link = car.link
        assert link is not None and link.session is not None
        current = link.session
        asked: list[str] = []
        link.rehello = lambda: asked.append("hello")  # type: ignore[method-assign]
        replies: FrameDecoder[Any] = FrameDecoder(EventsAck | Refused)

        async def refuse(session_id: str) -> None:
            frame = RunEvents(session_id=session_id, owner_epoch=current.owner_epoch, events=[])
            reply = await link.request(link.subjects.events, frame, replies, 5.0)
            assert isinstance(reply, Refused)

        await refuse(new_id("ses"))
        await refuse(new_id("ses"))
        assert asked == []
        link._helloing = True  # a hello on its way answers a refusal meanwhile
        await refuse(current.session_id)
        assert asked == []
        link._helloing = False
        await refuse(current.session_id)
        assert asked == ["hello"]


@pytest.mark.anyio
async def test_hub_boot_makes_the_sidecar_say_hello_again(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        assert len(hub.welcomes) == 1
        await hub.announce(hub.boot_id)  # the same hub again: nothing to do
        await hub.announce("boot_" + "1" * 26)
        await wait_for(lambda: len(hub.welcomes) == 2)
        assert car.link is not None
        await wait_for(
            lambda: (
                car.link is not None
                and car.link.session is not None
                and car.link.session.hub_boot_id == "boot_" + "1" * 26
            )
        )
        assert len(hub.welcomes) == 2


@pytest.mark.anyio
async def test_a_new_hub_boot_abandons_the_request_in_flight_and_resends_at_once(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, request_timeout=60.0, drop_acks=1) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        # The hub took the events and will never answer: it "died" meanwhile.
        await wait_for(lambda: hub.batches == 1)
        await hub.announce("boot_" + "2" * 26)
        # Resent long before the 60 s request timeout (maybe before the new
        # welcome: the fake takes it under the old session), and hello again.
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)], timeout=10, what="a resend")
        await wait_for(lambda: len(hub.welcomes) == 2, what="a hello to the new hub")
        assert hub.batches == 2
    assert len(hub.of_kind(DispatchProcessed)) == 1


@pytest.mark.anyio
async def test_a_transport_reconnect_makes_the_sidecar_say_hello_again(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    async with fake_hub(bus, dep) as hub, running_sidecar(bus, dep) as car:
        assert car.link is not None
        transport = car.link.transport
        await bus.disconnect(transport)  # type: ignore[arg-type]
        await bus.reconnect(transport)  # type: ignore[arg-type]
        await wait_for(lambda: len(hub.welcomes) == 2)


async def _deleted_notice_then(tmp_path: Path, *, revoke: bool) -> tuple[list[str], int]:
    """A Fenced{deployment_not_live} notice; then NATS revokes the sidecar's
    identity before (``revoke``) or after the hub welcomed the hello the
    notice asked for. Why the sidecar stopped as deleted (empty: it did
    not), and the hellos the hub saw."""
    from sidecar import DeploymentGone

    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    notice = Fenced(deployment_id=dep.id, reason="deployment_not_live")
    async with fake_hub(bus, dep) as hub:
        car = Sidecar(
            SidecarOptions(state_dir=tmp_path, deployment_id=dep.id, hello_timeout=0.2),
            connect=bus_connect(bus),
        )
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    await car.run()
                except DeploymentGone as exc:
                    why.append(str(exc))
                gone.set()

            gone, why = anyio.Event(), list[str]()
            tg.start_soon(run)
            await wait_for(lambda: len(hub.welcomes) == 1, what="a session")
            assert car.link is not None
            transport = car.link.transport
            if revoke:
                # The race an e2e run hit: the notice arrives, and NATS
                # revokes the identity before the hub answers the hello.
                hub.silent_hellos = True
                asked = len(hub.hellos)
                await hub.transport.publish(hub.subjects.inbound(dep.id), encode(notice))
                await wait_for(
                    lambda: len(hub.hellos) > asked, what="the hello the notice asks for"
                )
                await bus.revoke(transport)  # type: ignore[arg-type]
                with anyio.fail_after(10):
                    await gone.wait()
                return why, len(hub.welcomes)
            # A notice alone (anyone able to publish on the subject could send
            # one) costs a hello; the hub welcomes it, and it carries on.
            await hub.transport.publish(hub.subjects.inbound(dep.id), encode(notice))
            await wait_for(lambda: len(hub.welcomes) == 2, what="the hello the notice asks for")
            await wait_for(lambda: car.link is not None and not car.link.told_gone)
            await bus.revoke(transport)  # type: ignore[arg-type]
            await wait_for(lambda: transport.credentials_refused)
            await bus.reconnect(transport)  # type: ignore[arg-type]
            await wait_for(lambda: len(hub.welcomes) == 3, what="a hello after the outage")
            car.stop()
        return why, len(hub.welcomes)


@pytest.mark.anyio
async def test_a_deleted_notice_with_the_identity_revoked_stops_the_sidecar(
    tmp_path: Path,
) -> None:
    why, welcomes = await _deleted_notice_then(tmp_path, revoke=True)
    assert why == [
        "hub refused: deployment_not_live (the hub said the deployment was deleted"
        " and NATS revoked its identity)"
    ]
    assert welcomes == 1  # the hello the notice asked for was never answered


@pytest.mark.anyio
async def test_a_deleted_notice_the_hub_contradicts_is_forgotten(tmp_path: Path) -> None:
    why, welcomes = await _deleted_notice_then(tmp_path, revoke=False)
    assert why == [] and welcomes == 3
