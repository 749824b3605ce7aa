"""Scale to zero on the wire, over a real nats-server: a Sleep granted in
one transaction (the sleep row written, the session ended: no deliveries,
no probes, no silent sidecar), refused ``busy`` while a dispatch waits for
delivery or a version waits to be loaded, refused for a stale session or
epoch or on another deployment's subject; answered again when repeated;
the asleep deployment's mail is kept and named by the wakes, and the next
Welcome wakes it and delivers what waited."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import anyio
import pytest

from hub.store import (
    Fence,
    SqliteStore,
    Trigger,
    accept_triggers,
    add_version,
    deployments_to_wake,
    get_deployment,
    grant_sleep,
    open_store,
)
from hub.wire.delivery import HealthConfig
from hub.wire.service import WireConfig
from hub.wire.sessions import Sleepers
from runtime import Reason, Sources, Subjects, Transport, Welcome, open_nats
from runtime.wire import Asleep, Frame, Sleep
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.wire import (
    Dep,
    Hub,
    Inbox,
    Sidecar,
    accept,
    deploy,
    refused,
    running_hub,
)

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def bus_of(nats: NatsServerProcess, dep: Dep) -> AsyncIterator[Transport]:
    """A connection as the deployment's sidecar has: replies to its own inbox."""
    async with open_nats(
        nats.url, name=f"sidecar-{dep.id}", inbox_prefix=Subjects.inbox_prefix(dep.id)
    ) as bus:
        yield bus


async def sleep(
    car: Sidecar, *, session_id: str | None = None, epoch: int | None = None, on: str = ""
) -> Frame:
    """The sidecar's Sleep under its session (or the one given); its answer."""
    current, owner_epoch = car.session
    frame = Sleep(
        deployment_id=car.dep.id,
        session_id=session_id or current,
        owner_epoch=owner_epoch if epoch is None else epoch,
    )
    return await car.request(on or car.subjects.sleep, frame)


async def asleep_since(hub: Hub, dep: Dep) -> float | None:
    row = await hub.one("SELECT since FROM deployment_sleep WHERE deployment_id = ?", dep.id)
    return None if row is None else float(row[0])


async def test_a_granted_sleep_ends_the_session_and_a_welcome_wakes_it(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with (
        open_nats(nats_server.url, name="hub") as hub_bus,
        running_hub(tmp_path, transport=hub_bus) as hub,
    ):
        dep = await deploy(hub.store)
        async with bus_of(nats_server, dep) as bus:
            car = Sidecar(hub, dep, transport=bus, own=True)
            assert isinstance(await car.hello(), Welcome)
            assert isinstance(answer := await sleep(car), Asleep)
            assert answer.deployment_id == dep.id
            since = await asleep_since(hub, dep)
            assert since is not None
            # Its session ended: not current, not shown as a silent sidecar.
            assert hub.wire.sessions.current(dep.id) is None
            health = hub.wire.health()
            assert health["sessions"] == [] and health["disconnected_sidecars"] == 0
            assert health["status"] == "ok"
            # Its answer was lost: the same Sleep again is answered alike,
            # and the deployment stays asleep since the first grant.
            assert isinstance(await sleep(car), Asleep)
            assert await asleep_since(hub, dep) == since
            # Any other frame of the asleep session is stale.
            assert refused(await sleep(car, epoch=car.session[1] + 1), Reason.STALE_EPOCH)
            # Woken: the next Welcome deletes the sleep row.
            again = Sidecar(hub, dep, transport=bus, own=True)
            assert isinstance(await again.hello(takeover=True), Welcome)
            assert await asleep_since(hub, dep) is None
            assert hub.wire.sessions.current(dep.id) is not None
            # The old session's Sleep is stale now; the new one may sleep.
            assert refused(await sleep(car), Reason.STALE_EPOCH)
            assert isinstance(await sleep(again), Asleep)


async def test_a_sleep_is_busy_while_a_dispatch_waits_for_delivery(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with (
        open_nats(nats_server.url, name="hub") as hub_bus,
        running_hub(tmp_path, transport=hub_bus) as hub,
        anyio.create_task_group() as tg,
    ):
        dep = await deploy(hub.store)
        async with bus_of(nats_server, dep) as bus:
            car, inbox = Sidecar(hub, dep, transport=bus, own=True), Inbox()
            # It has stopped taking deliveries: a frame is left unanswered.
            inbox.answer = lambda frame: None
            await tg.start(inbox.serve, car)
            assert isinstance(await car.hello(), Welcome)
            # Accepted just before the Sleep: the grant sees it reserved.
            await accept(hub, dep, [b"late"])
            reply = await sleep(car)
            assert refused(reply, Reason.BUSY), reply
            assert await asleep_since(hub, dep) is None
            assert hub.wire.sessions.current(dep.id) is not None
            # It takes deliveries again: once acknowledged, nothing is reserved.
            inbox.answer = Inbox().answer
            await wait_for(lambda: len(inbox.frames) >= 2, what="the mail sent again")
            await wait_for(
                lambda: hub.one("SELECT 1 FROM workflow_run_dispatch WHERE status = 'delivered'"),
                what="the mail delivered",
            )
            assert isinstance(await sleep(car), Asleep)
            tg.cancel_scope.cancel()


async def test_a_sleep_is_busy_while_a_version_waits_and_a_rollout_wakes_a_sleeper(
    tmp_path: Path,
) -> None:
    sources = Sources(files={"flow.py": "async def main(ctx, item):\n    return 2\n"},
                      entrypoint="flow:main")  # fmt: skip
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        car = Sidecar(hub, dep, own=True)
        assert isinstance(await car.hello(), Welcome)
        await hub.store.transact(partial(add_version, deployment_id=dep.id, sources=sources))
        assert refused(await sleep(car), Reason.BUSY)
        # Asleep, a rollout requests its wake: the wakes name it.
        other = await deploy(hub.store, "other")
        sleeper = Sidecar(hub, other, own=True)
        assert isinstance(await sleeper.hello(), Welcome)
        assert isinstance(await sleep(sleeper), Asleep)
        assert await hub.wire.wakes(0) == []
        await hub.store.transact(partial(add_version, deployment_id=other.id, sources=sources))
        hub.wire.on_rollout(other.id)
        assert await hub.wire.wakes(0) == [other.id]
        row = await hub.one("SELECT wake_requested FROM deployment_sleep WHERE deployment_id = ?",
                            other.id)  # fmt: skip
        assert row is not None and row[0] is not None


async def test_a_sleep_of_a_stale_session_or_on_another_deployments_subject_is_refused(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        a, b = await deploy(hub.store, "a"), await deploy(hub.store, "b")
        car_a, car_b = Sidecar(hub, a, own=True), Sidecar(hub, b, own=True)
        for car in (car_a, car_b):
            assert isinstance(await car.hello(), Welcome)
        session_b, epoch_b = car_b.session
        # A's identity names B's session, on A's subject: no such session of A.
        forged = Sleep(deployment_id=b.id, session_id=session_b, owner_epoch=epoch_b)
        assert refused(await car_a.request(car_a.subjects.sleep, forged), Reason.UNKNOWN_SESSION)
        # An unknown session, and a stale epoch.
        assert refused(await sleep(car_b, session_id="ses_" + "0" * 26), Reason.UNKNOWN_SESSION)
        assert refused(await sleep(car_b, epoch=epoch_b + 1), Reason.STALE_EPOCH)
        # A takeover: the old owner's Sleep is stale.
        newer = Sidecar(hub, b, own=True)
        assert isinstance(await newer.hello(takeover=True), Welcome)
        assert refused(await sleep(car_b), Reason.STALE_EPOCH)
        assert await hub.all("SELECT * FROM deployment_sleep") == []
        assert hub.wire.sessions.current(b.id) is not None


async def test_an_asleep_deployment_gets_no_delivery_its_mail_wakes_it_and_waits(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    config = WireConfig(health=HealthConfig(undeliverable_after=1.0))
    async with (
        open_nats(nats_server.url, name="hub") as hub_bus,
        running_hub(tmp_path, transport=hub_bus, config=config) as hub,
        anyio.create_task_group() as tg,
    ):
        dep = await deploy(hub.store)
        async with bus_of(nats_server, dep) as bus:
            car, inbox = Sidecar(hub, dep, transport=bus, own=True), Inbox()
            await tg.start(inbox.serve, car)
            assert isinstance(await car.hello(), Welcome)
            assert isinstance(await sleep(car), Asleep)
            assert await hub.wire.wakes(0) == []
            # A long poll is answered as soon as a mail comes.
            polled: list[list[str]] = []

            async def poll() -> None:
                polled.append(await hub.wire.wakes(20))

            tg.start_soon(poll)
            kept = await accept(hub, dep, [b"a", b"b", b"c"])
            with anyio.fail_after(5):
                await wait_for(lambda: polled, what="the long poll's answer")
            assert polled == [[dep.id]]
            assert await hub.store.read(deployments_to_wake) == [dep.id]
            # Past a probe's silence and several censuses and sweeps: nothing
            # was sent to it, not even a probe.
            await wait_for(
                lambda: (
                    hub.wire.dispatcher.stats()["pending"].get(dep.id, {}).get("oldest_age", 0)
                    > 2.5
                ),
                what="the mail waiting past the probe's silence",
            )
            assert inbox.frames == [] and inbox.pings == []
            # No silent sidecar: its mail waits for a wake, and says so.
            health = hub.wire.health()
            assert health["sessions"] == [] and health["disconnected_sidecars"] == 0
            assert [(u["deployment_id"], u["last_error"]) for u in health["undeliverable"]] == [
                (dep.id, "asleep: not woken yet")
            ]
            view = await hub.store.read(partial(get_deployment, key=dep.id))
            assert view.pending == 3
            # Woken, it gets what waited, in order.
            awake = Sidecar(hub, dep, transport=bus, own=True)
            assert isinstance(await awake.hello(takeover=True), Welcome)
            await wait_for(lambda: len(inbox.frames) == 3, what="the kept mail delivered")
            assert [f.dispatch_id for f in inbox.frames] == [r.dispatch_id for r in kept]
            assert await hub.wire.wakes(0) == []
            tg.cancel_scope.cancel()


async def test_a_poke_of_an_asleep_deployment_answers_a_long_poll_at_once(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        dep, awake = await deploy(store, "asleep"), await deploy(store, "awake")
        assert await store.transact(partial(grant_sleep, fence=Fence(dep.id, 0))) is None
        # A re-read far beyond the test's deadline: only a poke can answer.
        sleepers = Sleepers(store, reread=60)
        await sleepers.load()
        assert dep.id in sleepers and awake.id not in sleepers and len(sleepers) == 1
        polled: list[list[str]] = []

        async def poll() -> None:
            polled.append(await sleepers.wakes(25))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                await anyio.wait_all_tasks_blocked()
                for target in (awake, dep):
                    trigger = Trigger(address=target.address, subject="hi", sender="a@b.c")
                    _, woken = await store.transact(partial(accept_triggers, triggers=[trigger]))
                    sleepers.poke(woken)
        assert polled == [[dep.id]]
        # Woken, it is no longer poked for.
        sleepers.woke(dep.id)
        assert dep.id not in sleepers


async def test_with_a_cursor_a_reread_answers_for_a_name_no_poke_announced(
    tmp_path: Path,
) -> None:
    """Another hub on the same database accepted the mail: no poke here.
    A poll with a cursor answers once a re-read names a deployment its
    first read had not, and not for one it had."""
    async with await open_store(tmp_path / "hub.db") as store:
        first, second = await deploy(store, "first"), await deploy(store, "second")
        for dep in (first, second):
            assert await store.transact(partial(grant_sleep, fence=Fence(dep.id, 0))) is None
        sleepers = Sleepers(store, reread=0.05)
        await sleepers.load()

        async def mail(dep: Dep) -> None:
            trigger = Trigger(address=dep.address, subject="hi", sender="a@b.c")
            await store.transact(partial(accept_triggers, triggers=[trigger]))  # not poked

        await mail(first)
        named, cursor = await sleepers.wakes_after(0, None)
        assert named == [first.id]
        # Re-read many times over, nothing new: it runs out.
        began = anyio.current_time()
        with anyio.fail_after(10):
            assert await sleepers.wakes_after(0.5, cursor) == ([first.id], cursor)
        assert anyio.current_time() - began >= 0.45
        polled: list[list[str]] = []

        async def poll() -> None:
            polled.append((await sleepers.wakes_after(25, cursor))[0])

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                await anyio.wait_all_tasks_blocked()
                assert not polled
                await mail(second)
        assert polled == [[first.id, second.id]]


async def test_a_poke_is_answered_from_a_read_of_the_poked_deployment_alone(
    tmp_path: Path,
) -> None:
    """The whole list reads every asleep deployment (2 ms of the hub's loop
    among 2,000): a wake's answer reads the deployment poked, by its key,
    and keeps what the last whole read named; a poll with the cursor of
    that answer waits, reading nothing, until there is news."""
    path = tmp_path / "hub.db"
    async with await SqliteStore.open(path) as store:
        deps = [await deploy(store, f"flow{n}") for n in range(30)]
        for dep in deps:
            assert await store.transact(partial(grant_sleep, fence=Fence(dep.id, 0))) is None
        first, woken = deps[3], deps[17]
        trigger = Trigger(address=first.address, subject="hi", sender="a@b.c")
        await store.transact(partial(accept_triggers, triggers=[trigger]))  # not poked
        sleepers = Sleepers(store, reread=60)
        await sleepers.load()
        named, cursor = await sleepers.wakes_after(0, None)
        assert named == [first.id]  # the whole list, read once
        statements: list[str] = []
        await store._reader.read(lambda conn: conn.set_trace_callback(statements.append))
        polled: list[tuple[list[str], str]] = []

        async def poll() -> None:
            polled.append(await sleepers.wakes_after(25, cursor))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                await anyio.wait_all_tasks_blocked()
                assert not polled
                trigger = Trigger(address=woken.address, subject="hi", sender="a@b.c")
                _, accepted = await store.transact(partial(accept_triggers, triggers=[trigger]))
                sleepers.poke(accepted)
        assert [named for named, _ in polled] == [[first.id, woken.id]]
        reads = [s for s in statements if "deployment_sleep" in s]
        assert len(reads) == 1, reads
        with sqlite3.connect(path) as conn:
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {reads[0]}")]
        assert not [step for step in plan if step.startswith("SCAN")], plan
        assert woken.id in reads[0]
        # Welcomed: no longer named, with nothing read again.
        sleepers.woke(woken.id)
        assert await sleepers.wakes_after(0, polled[0][1]) == ([first.id], polled[0][1])
        assert len([s for s in statements if "deployment_sleep" in s]) == 1
