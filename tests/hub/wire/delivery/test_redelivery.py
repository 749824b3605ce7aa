"""Stuck deliveries: a dispatch delivered but never processed is sent again,
and one that stays unprocessed is reported.

The hub and the fake sidecar talk over a real nats-server; the store is a
real SQLite file. The fake sidecar acknowledges frames as stored and keeps
nothing, so every Ack is one whose envelope is gone: only a DispatchProcessed
the test sends ever settles a dispatch.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import anyio
import anyio.abc
import pytest

from hub.store import Accepted, Overdue, Trigger, accept_triggers
from hub.store.delivery.redelivery import OVERDUE, overdue_params
from hub.wire.delivery.dispatcher import DispatchConfig
from hub.wire.delivery.health import HealthConfig
from hub.wire.delivery.redelivery import Redeliveries
from hub.wire.service import WireConfig
from runtime import (
    Ack,
    Backoff,
    DispatchProcessed,
    EventsAck,
    MailInbound,
    RunStatus,
    Transport,
    Welcome,
    new_id,
    open_nats,
)
from runtime.testing import configure_failpoints, failpoint_spent
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.wire import Hub, Inbox, Sidecar, accept, deploy, running_hub, send
from tests.support.store import execute

# slow: every test waits out a redelivery bound
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND = 0.4


def config(
    *, redeliver_after: float = BOUND, window: int = 64, stuck_resends: int = 3
) -> WireConfig:
    return WireConfig(
        dispatch=DispatchConfig(
            window=window,
            redeliver_window=window,
            request_timeout=1.0,
            backoff=Backoff(0.05, 0.2),
            census_interval=0.05,
            redeliver_after=redeliver_after,
        ),
        health=HealthConfig(undeliverable_after=30.0, stuck_resends=stuck_resends),
    )


@pytest.fixture(autouse=True)
def _no_failpoints() -> Iterator[None]:
    yield
    configure_failpoints("")


@asynccontextmanager
async def wire_over_nats(
    tmp_path: Path, nats_server: NatsServerProcess, wire: WireConfig
) -> AsyncIterator[tuple[Hub, Transport, anyio.abc.TaskGroup]]:
    """The hub's wire side on a real nats-server, a second connection for
    fake sidecars, and a task group for their inboxes."""
    async with (
        open_nats(nats_server.url, name="hub") as hub_bus,
        open_nats(nats_server.url, name="sidecars") as car_bus,
        running_hub(tmp_path, config=wire, transport=hub_bus) as hub,
        anyio.create_task_group() as tg,
    ):
        yield hub, car_bus, tg
        tg.cancel_scope.cancel()


async def sidecar(
    hub: Hub, bus: Transport, tg: anyio.abc.TaskGroup, inbox: Inbox, name: str = "flow"
) -> Sidecar:
    """A deployment whose fake sidecar serves ``inbox`` and is welcomed."""
    car = Sidecar(hub, await deploy(hub.store, name), transport=bus, timeout=2.0)
    await tg.start(inbox.serve, car)
    assert isinstance(await car.hello(), Welcome)
    return car


def processed(receipt: Accepted) -> DispatchProcessed:
    return DispatchProcessed(
        event_id=new_id("evt"),
        run_id=receipt.run_id,
        dispatch_id=receipt.dispatch_id,
        seq=receipt.seq,
    )


async def rows(hub: Hub, dep_id: str) -> list[tuple[str, str, float | None]]:
    found = await hub.all(
        "SELECT id, status, delivered_at FROM workflow_run_dispatch"
        " WHERE deployment_id = ? ORDER BY seq",
        dep_id,
    )
    return [(r["id"], r["status"], r["delivered_at"]) for r in found]


async def statuses(hub: Hub, dep_id: str) -> list[str]:
    return [status for _, status, _ in await rows(hub, dep_id)]


def are(hub: Hub, dep_id: str, expected: list[str]) -> Callable[[], Awaitable[bool]]:
    """The deployment's dispatches have these statuses, in seq order."""

    async def check() -> bool:
        return await statuses(hub, dep_id) == expected

    return check


def sent(inbox: Inbox) -> Counter[str]:
    """How often each dispatch reached the sidecar."""
    return Counter(f.dispatch_id for f in inbox.frames)


async def test_a_delivered_dispatch_never_processed_is_sent_again_after_the_bound(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with wire_over_nats(tmp_path, nats_server, config()) as (hub, bus, tg):
        inbox = Inbox()  # acks "stored" and keeps nothing: the envelopes are lost
        car = await sidecar(hub, bus, tg, inbox)
        receipts = await accept(hub, car.dep, [b"lost", b"behind it"])
        ids = [r.dispatch_id for r in receipts]
        await wait_for(are(hub, car.dep.id, ["delivered"] * 2))
        first = {i: at for i, _, at in await rows(hub, car.dep.id)}
        assert sent(inbox) == dict.fromkeys(ids, 1)

        # Nothing comes back: after the bound both are sent again (the one
        # behind waits for the lost one at the sidecar, in seq order) and,
        # acknowledged again, delivered by that fresh delivery.
        await wait_for(lambda: all(sent(inbox)[i] >= 2 for i in ids))

        async def delivered_again() -> bool:
            now = await rows(hub, car.dep.id)
            return all(s == "delivered" and at is not None and at > first[i] for i, s, at in now)

        await wait_for(delivered_again)
        assert {f.seq for f in inbox.frames if f.dispatch_id == ids[0]} == {receipts[0].seq}
        assert hub.wire.dispatcher.redelivered_total >= 2
        assert "mailrun_dispatch_redelivered_total" in hub.wire.metrics()

        # Now the sidecar has them and processes them: they are done, forgotten.
        reply = await send(car, processed(receipts[0]), processed(receipts[1]))
        assert isinstance(reply, EventsAck)
        await wait_for(are(hub, car.dep.id, ["processed"] * 2))
        await wait_for(lambda: hub.wire.dispatcher.redelivered() == [])
        assert hub.wire.health()["stuck"] == []


async def test_a_dispatch_processed_just_before_the_resend_is_left_alone(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    gate = tmp_path / "gate"
    point = "hub.redeliver.before_put_back"
    configure_failpoints(f"{point}=1*pause({gate})")
    async with wire_over_nats(tmp_path, nats_server, config()) as (hub, bus, tg):
        inbox = Inbox()
        car = await sidecar(hub, bus, tg, inbox)
        done, stuck = await accept(hub, car.dep, [b"done in the gap", b"never processed"])
        await wait_for(are(hub, car.dep.id, ["delivered"] * 2))

        # The sweep has read both as overdue and waits before writing.
        await wait_for(lambda: failpoint_spent(point))
        assert isinstance(await send(car, processed(done)), EventsAck)
        await wait_for(are(hub, car.dep.id, ["processed", "delivered"]))
        gate.touch()

        # The one still delivered is put back and sent again; the one
        # processed meanwhile is not touched by that same write.
        await wait_for(lambda: sent(inbox)[stuck.dispatch_id] >= 2)
        assert sent(inbox)[done.dispatch_id] == 1
        await wait_for(are(hub, car.dep.id, ["processed", "delivered"]))
        row = await hub.one(
            "SELECT processed_at FROM workflow_run_dispatch WHERE id = ?", done.dispatch_id
        )
        assert row["processed_at"] is not None


async def test_a_dispatch_that_stays_unprocessed_is_reported_stuck_until_processed(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    wire = config(redeliver_after=0.2, stuck_resends=2)
    async with wire_over_nats(tmp_path, nats_server, wire) as (hub, bus, tg):
        inbox = Inbox()
        car = await sidecar(hub, bus, tg, inbox)
        other = await sidecar(hub, bus, tg, Inbox(), name="healthy")
        [receipt] = await accept(hub, car.dep, [b"never processed"])
        health = hub.wire.health()
        assert health["stuck"] == [] and health["status"] == "ok"

        await wait_for(lambda: hub.wire.health()["stuck"])
        health = hub.wire.health()
        [stuck] = health["stuck"]
        assert stuck["deployment_id"] == car.dep.id and stuck["count"] == 1
        assert (stuck["dispatch_id"], stuck["seq"]) == (receipt.dispatch_id, receipt.seq)
        assert stuck["redelivered"] >= 2 and stuck["stuck_for"] >= 0.2
        assert health["status"] == "degraded" and health["undeliverable"] == []
        assert hub.wire.deployment_health(car.dep.id)["stuck"] == 1
        assert hub.wire.deployment_health(other.dep.id)["stuck"] == 0
        assert "mailrun_dispatch_stuck 1\n" in hub.wire.metrics()

        assert isinstance(await send(car, processed(receipt)), EventsAck)
        await wait_for(lambda: hub.wire.health()["stuck"] == [])
        health = hub.wire.health()
        assert health["status"] == "ok"
        assert hub.wire.deployment_health(car.dep.id)["stuck"] == 0
        assert "mailrun_dispatch_stuck 0\n" in hub.wire.metrics()
        assert await statuses(hub, car.dep.id) == ["processed"]


SET_RUN_STATUS = "UPDATE workflow_run SET status = ? WHERE id = ?"


async def test_a_run_waiting_on_an_approval_keeps_its_deliveries(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with wire_over_nats(tmp_path, nats_server, config()) as (hub, bus, tg):
        held_inbox, clock_inbox = Inbox(), Inbox()
        held = await sidecar(hub, bus, tg, held_inbox, name="held")
        [gated] = await accept(hub, held.dep, [b"arrived while waiting"])
        await wait_for(are(hub, held.dep.id, ["delivered"]))
        await execute(
            hub.store,
            "UPDATE workflow_run SET status = ? WHERE id = ?",
            RunStatus.WAITING,
            gated.run_id,
        )
        # A deployment delivered later is overdue later: once it has been
        # sent again twice, sweeps have long passed over the waiting one.
        clock = await sidecar(hub, bus, tg, clock_inbox, name="clock")
        [tick] = await accept(hub, clock.dep, [b"tick"])
        await wait_for(lambda: sent(clock_inbox)[tick.dispatch_id] >= 3)
        assert sent(held_inbox)[gated.dispatch_id] == 1
        assert await statuses(hub, held.dep.id) == ["delivered"]
        # Its decision is not held: delivered and never processed, it is overdue.
        decision = Trigger(
            deployment_id=held.dep.id, run_id=gated.run_id, kind="approval", subject="approve"
        )
        (accepted,), woken = await hub.store.transact(partial(accept_triggers, triggers=[decision]))
        hub.wire.on_accepted(woken)
        assert isinstance(accepted, Accepted)
        await wait_for(lambda: sent(held_inbox)[accepted.dispatch_id] >= 2)
        assert sent(held_inbox)[gated.dispatch_id] == 1

        # The decision came: the run runs again, and what it holds is overdue.
        await execute(
            hub.store,
            "UPDATE workflow_run SET status = ? WHERE id = ?",
            RunStatus.RUNNING,
            gated.run_id,
        )
        await wait_for(lambda: sent(held_inbox)[gated.dispatch_id] >= 2)


async def test_only_the_head_is_resent_and_at_most_once_per_bound(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with wire_over_nats(tmp_path, nats_server, config(window=3)) as (hub, bus, tg):
        answered: list[tuple[str, float]] = []

        def answer(frame: MailInbound) -> Ack | None:
            answered.append((frame.dispatch_id, time.time()))
            if sent(inbox)[frame.dispatch_id] == 2:
                # The first re-send goes unanswered: the head stays reserved
                # for a request timeout, and sweeps meanwhile must not take
                # the dispatches behind it for the head.
                return None
            return Ack(dispatch_id=frame.dispatch_id, result="stored")

        inbox = Inbox(answer=answer)
        car = await sidecar(hub, bus, tg, inbox)
        receipts = await accept(hub, car.dep, [f"m{i}".encode() for i in range(7)])
        ids = [r.dispatch_id for r in receipts]
        head, rest = ids[:3], ids[3:]

        # A slow sidecar with a backlog of 7: the sidecar takes them in seq
        # order, so only the first 3 (the window) are ever sent again.
        await wait_for(lambda: all(sent(inbox)[i] >= 4 for i in head))
        assert [sent(inbox)[i] for i in rest] == [1] * 4
        for dispatch_id in head:
            times = [at for i, at in answered if i == dispatch_id]
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert min(gaps) >= BOUND, gaps  # since the latest delivery, every time

        # The head is processed: the next window is overdue and goes out.
        assert isinstance(await send(car, *(processed(r) for r in receipts[:3])), EventsAck)
        await wait_for(lambda: all(sent(inbox)[i] >= 2 for i in rest[:3]))
        assert sent(inbox)[rest[3]] == 1


async def test_the_sweep_reads_one_index_range_per_live_deployment(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        assert hub.store.path is not None
        params = overdue_params(64, time.time())
        with sqlite3.connect(hub.store.path) as conn:
            plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {OVERDUE.sqlite}", params)]
    # Never a scan of the dispatch table: its processed history can be huge.
    assert not [step for step in plan if step.startswith("SCAN") and "dep" not in step], plan
    assert any("SEARCH d USING INDEX dispatch_pending" in step for step in plan), plan
    assert any("deployment_live_address" in step for step in plan), plan  # live ones only


def test_redelivery_memory_is_bounded_and_forgets_what_was_processed() -> None:
    memory = Redeliveries(limit=3)
    rows = [Overdue(f"dsp_{i}", "dep_a" if i % 2 else "dep_b", i, 1.0) for i in range(5)]
    memory.record(rows, now=10.0)
    memory.record(rows[4:], now=11.0)  # re-sent again: the most recent entry
    assert memory.ids() == ["dsp_2", "dsp_3", "dsp_4"] and memory.total == 6
    assert [e.times for e in memory] == [1, 1, 2]
    assert [e.dispatch_id for e in memory.of("dep_a")] == ["dsp_3"]
    memory.keep({"dsp_4"})
    assert memory.ids() == ["dsp_4"] and memory.of("dep_a") == [] and memory.total == 6
