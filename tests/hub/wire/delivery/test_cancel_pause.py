"""Cancel and pause on the wire, over a real nats-server: a cancel item
delivered like any item, with its reason and terminate flag; a paused
deployment's dispatches kept from its sidecar while another deployment's
go out, then delivered in seq order once it is unpaused;
``max_concurrent_runs`` in every Welcome."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import msgspec
import pytest

from hub.store import (
    PolicyChange,
    cancel_run,
    pause_deployment,
    set_policy,
    unpause_deployment,
)
from runtime import Welcome, open_nats
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.wire import Inbox, Sidecar, accept, deploy, running_hub

pytestmark = pytest.mark.anyio


async def test_a_paused_deployment_gets_nothing_until_unpaused_then_all_in_order(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with (
        open_nats(nats_server.url, name="hub") as hub_bus,
        open_nats(nats_server.url, name="sidecars") as car_bus,
        running_hub(tmp_path, transport=hub_bus) as hub,
        anyio.create_task_group() as tg,
    ):
        paused, other = await deploy(hub.store, "paused"), await deploy(hub.store, "other")
        cars = [Sidecar(hub, d, transport=car_bus) for d in (paused, other)]
        inboxes = [Inbox(), Inbox()]
        for car, inbox in zip(cars, inboxes, strict=True):
            await tg.start(inbox.serve, car)
            assert isinstance(await car.hello(), Welcome)
        await hub.store.transact(partial(pause_deployment, deployment_id=paused.id))
        kept = await accept(hub, paused, [b"a", b"b", b"c"])
        await accept(hub, other, [b"x"])
        # The other deployment's mail went out: the paused one's was kept.
        await wait_for(lambda: len(inboxes[1].frames) == 1, what="the other one's mail")
        assert inboxes[0].frames == []
        await hub.store.transact(partial(unpause_deployment, deployment_id=paused.id))
        hub.wire.on_accepted({paused.id})
        await wait_for(lambda: len(inboxes[0].frames) == 3, what="the kept mail delivered")
        assert [f.dispatch_id for f in inboxes[0].frames] == [r.dispatch_id for r in kept]
        assert [f.seq for f in inboxes[0].frames] == [1, 2, 3]
        tg.cancel_scope.cancel()


async def test_a_cancel_is_delivered_as_an_item_with_its_reason_and_terminate(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with (
        open_nats(nats_server.url, name="hub") as hub_bus,
        open_nats(nats_server.url, name="sidecar") as car_bus,
        running_hub(tmp_path, transport=hub_bus) as hub,
        anyio.create_task_group() as tg,
    ):
        dep = await deploy(hub.store)
        car, inbox = Sidecar(hub, dep, transport=car_bus), Inbox()
        await tg.start(inbox.serve, car)
        assert isinstance(await car.hello(), Welcome)
        (first,) = await accept(hub, dep, [b"a"])
        cancelling = partial(cancel_run, run_id=first.run_id, reason="stop", terminate=True)
        receipt = await hub.store.transact(cancelling)
        hub.wire.on_accepted({dep.id})
        await wait_for(lambda: len(inbox.frames) == 2, what="the mail and the cancel")
        frame = inbox.frames[1]
        assert (frame.dispatch_id, frame.kind, frame.run_id, frame.seq, frame.subject) == (
            receipt.dispatch_id, "cancel", first.run_id, 2, "stop",
        )  # fmt: skip
        assert frame.message_id == f"terminate:{first.run_id}"
        assert msgspec.json.decode(frame.body or b"") == {"reason": "stop", "terminate": True}
        tg.cancel_scope.cancel()


async def test_every_welcome_carries_max_concurrent_runs(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        first = await Sidecar(hub, dep).hello()
        assert isinstance(first, Welcome) and first.policy is not None
        assert first.policy.max_concurrent_runs == 16
        change = PolicyChange(max_concurrent_runs=4)
        await hub.store.transact(partial(set_policy, deployment_id=dep.id, change=change))
        again = await Sidecar(hub, dep).hello(takeover=True)
        assert isinstance(again, Welcome) and again.policy is not None
        assert again.policy.max_concurrent_runs == 4
