"""Schedules in the store, and the schedule loop over it: a fire is one
transaction that moves the schedule on only if it is still at the due time
it read, so two hubs firing one due time make one dispatch; the item goes to
the deployment's top-level run (minted by the first fire) with its body and
message id; a fire the run cannot take moves the schedule on; the loop
fires what is due, wakes the dispatcher, and outlives a failing store."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, cast

import anyio
import msgspec
import pytest

from hub import Accepted, Acceptor, Rejected, Store, StoreUnavailable, Trigger
from hub.clock import Scheduler
from hub.store import (
    ScheduleView,
    add_schedule,
    create_deployment,
    delete_deployment,
    fire_message_id,
    fire_schedule,
    open_store,
)
from runtime import Backoff
from runtime.schedules import ScheduleSpec
from runtime.wire import SCHEDULE_KIND, ScheduleFired
from tests.support import wait_for
from tests.support.store import execute, read_one, row, rows

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def hub_store(database: str) -> AsyncIterator[Store]:
    async with await open_store(database) as store:
        yield store


async def deploy(store: Store, name: str = "flow") -> str:
    created = await create_deployment(
        store, name=name, source="async def main(ctx, item): pass\n",
        domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
    )  # fmt: skip
    return created.deployment_id


async def schedule(
    store: Store, dep_id: str, *, every: float = 60, subject: str = "tick", payload: Any = None
) -> ScheduleView:
    return await store.transact(
        partial(
            add_schedule,
            deployment_id=dep_id,
            spec=ScheduleSpec(every=every),
            subject=subject,
            payload=None if payload is None else msgspec.json.encode(payload),
            now=time.time(),
        )
    )


async def due_now(store: Store, view: ScheduleView, due: float) -> ScheduleView:
    """The schedule, made due at ``due`` (in the past)."""
    await execute(store, "UPDATE schedule SET next_due = ? WHERE id = ?", due, view.id)
    return msgspec.structs.replace(view, next_due=due)


async def dispatches(store: Store) -> list[dict[str, Any]]:
    found = await rows(
        store,
        "SELECT run_id, kind, message_id, subject, body, seq FROM workflow_run_dispatch"
        " ORDER BY seq",
    )
    keys = ("run_id", "kind", "message_id", "subject", "body", "seq")
    return [dict(zip(keys, r, strict=True)) for r in found]


async def next_due(store: Store, schedule_id: str) -> float | None:
    found = await read_one(store, "SELECT next_due FROM schedule WHERE id = ?", schedule_id)
    return None if found is None else float(found[0])


async def test_two_hubs_firing_one_due_time_make_one_dispatch(database: str) -> None:
    async with hub_store(database) as one, hub_store(database) as other:
        dep_id = await deploy(one)
        view = await schedule(one, dep_id, every=10, payload={"n": 1})
        due = time.time() - 25.0  # two intervals missed, and this one
        view = await due_now(one, view, due)
        fires: list[Any] = []

        async def fire(store: Store) -> None:
            now = time.time()
            fires.append(await store.transact(partial(fire_schedule, schedule=view, now=now)))

        async with anyio.create_task_group() as tg:
            for store in (one, other, one, other):
                tg.start_soon(fire, store)

        owned = [f for f in fires if f.outcome is not None]
        assert len(owned) == 1, fires
        (fired,) = owned
        assert isinstance(fired.outcome, Accepted) and fired.woken == {dep_id}
        (dispatch,) = await dispatches(one)
        assert dispatch["kind"] == SCHEDULE_KIND and dispatch["subject"] == "tick"
        message_id = fire_message_id(view.id, due)
        assert dispatch["message_id"] == message_id == f"schedule:{view.id}:{due!r}"
        assert dispatch["run_id"] == fired.outcome.run_id
        body = msgspec.json.decode(bytes(dispatch["body"]), type=ScheduleFired)
        assert (body.schedule_id, body.due_at, body.subject, body.payload) == (
            view.id, due, "tick", {"n": 1},
        )  # fmt: skip
        assert body.fired_at >= due + 25.0
        # The missed intervals collapse into this fire: the next is the first
        # point of the schedule's grid after the fire.
        following = await next_due(one, view.id)
        assert following == fired.next_due == due + 30.0
        assert following is not None and following > body.fired_at


async def test_fires_go_to_the_top_level_run_minted_by_the_first(database: str) -> None:
    async with hub_store(database) as store:
        dep_id = await deploy(store)
        view = await schedule(store, dep_id, every=5)
        outcomes = []
        for due in (time.time() - 20.0, time.time() - 10.0):
            view = await due_now(store, view, due)
            fire = await store.transact(partial(fire_schedule, schedule=view, now=time.time()))
            outcomes.append(fire.outcome)
        first, second = outcomes
        assert isinstance(first, Accepted) and isinstance(second, Accepted)
        assert first.run_id == second.run_id and second.seq == first.seq + 1
        top = await row(store, "SELECT parent_run_id, is_anchor FROM workflow_run WHERE id = ?",
                        first.run_id)  # fmt: skip
        assert top == {"parent_run_id": None, "is_anchor": 0}


async def test_a_fire_the_ended_run_refuses_moves_the_schedule_on(database: str) -> None:
    async with hub_store(database) as store:
        dep_id = await deploy(store)
        view = await schedule(store, dep_id, every=5)
        view = await due_now(store, view, time.time() - 1.0)
        fire = await store.transact(partial(fire_schedule, schedule=view, now=time.time()))
        assert isinstance(fire.outcome, Accepted)
        await execute(store, "UPDATE workflow_run SET status = 'completed' WHERE id = ?",
                      fire.outcome.run_id)  # fmt: skip
        view = await due_now(store, view, time.time() - 0.5)
        refused = await store.transact(partial(fire_schedule, schedule=view, now=time.time()))
        assert isinstance(refused.outcome, Rejected)
        assert refused.outcome.reason == "workflow_run_terminal"
        assert len(await dispatches(store)) == 1
        moved = await next_due(store, view.id)
        assert moved is not None and moved > time.time()


async def test_a_deleted_deployments_schedules_go_with_it(database: str) -> None:
    async with hub_store(database) as store:
        dep_id = await deploy(store)
        kept_id = await deploy(store, "kept")
        view = await schedule(store, dep_id)
        kept = await schedule(store, kept_id)
        assert await delete_deployment(store, dep_id)
        assert await next_due(store, view.id) is None
        assert await next_due(store, kept.id) == kept.next_due
        # A fire read before the delete finds nothing to fire.
        fire = await store.transact(partial(fire_schedule, schedule=view, now=time.time()))
        assert fire.outcome is None and await dispatches(store) == []


class Flaky:
    """A store whose first ``failures`` calls fail as an unreachable database does."""

    def __init__(self, store: Store, failures: int) -> None:
        self.store, self.failures, self.calls = store, failures, 0

    def _fail(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise StoreUnavailable("the database is gone")

    async def read(self, body: Any, **kw: Any) -> Any:
        self._fail()
        return await self.store.read(body, **kw)

    async def transact(self, body: Any, **kw: Any) -> Any:
        self._fail()
        return await self.store.transact(body, **kw)


async def test_the_loop_fires_what_is_due_wakes_the_dispatcher_and_outlives_the_store(
    database: str,
) -> None:
    async with hub_store(database) as store:
        dep_id = await deploy(store)
        woken: list[set[str]] = []
        flaky = Flaky(store, failures=3)
        scheduler = Scheduler(
            cast(Store, flaky), on_accepted=woken.append, backoff=Backoff(0.01, 0.05)
        )
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            # Until the store answers, nothing is fired and the loop goes on.
            await wait_for(lambda: flaky.calls > 3, what="the loop trying the store again")
            view = await schedule(store, dep_id, every=3600)
            view = await due_now(store, view, time.time() - 1.0)
            scheduler.wake()
            (dispatch,) = await wait_for(lambda: dispatches(store), what="the fire")
            assert dispatch["message_id"] == fire_message_id(view.id, view.next_due)
            await wait_for(lambda: woken, what="the dispatcher woken")
            assert woken == [{dep_id}]
            assert scheduler.fires.values[""] == 1 and scheduler.rejected.values[""] == 0
            assert "mailrun_schedule_fires_total 1" in scheduler.render()
            moved = await next_due(store, view.id)
            assert moved is not None and moved > time.time() + 3000
            assert scheduler.last_error is None
            tg.cancel_scope.cancel()


async def test_the_loop_sleeps_until_the_earliest_due_time(database: str) -> None:
    async with hub_store(database) as store, anyio.create_task_group() as tg:
        dep_id = await deploy(store)
        scheduler = Scheduler(store)
        await tg.start(scheduler.run)
        # Woken once, when it is added; the fires after that come from the
        # loop's own sleep until the earliest due time.
        view = await schedule(store, dep_id, every=1)
        scheduler.wake()
        first = await wait_for(lambda: dispatches(store), what="the first fire")
        assert first[0]["message_id"] == fire_message_id(view.id, view.next_due)
        second = await wait_for(
            lambda: _at_least(store, 2), what="the second fire, one interval on"
        )
        body = msgspec.json.decode(bytes(second[1]["body"]), type=ScheduleFired)
        assert body.due_at == view.next_due + 1
        assert scheduler.rejected.values[""] == 0
        tg.cancel_scope.cancel()


async def _at_least(store: Store, n: int) -> list[dict[str, Any]] | None:
    found = await dispatches(store)
    return found if len(found) >= n else None


async def test_accepted_by_the_acceptor_path_too(database: str) -> None:
    """A fire and a mail share the top-level run and its seq order."""
    async with hub_store(database) as store:
        acceptor = Acceptor(store)
        async with anyio.create_task_group() as tg:
            await tg.start(acceptor.run)
            dep_id = await deploy(store)
            mail = await acceptor.accept(
                Trigger(address="flow@mailrun.local", sender="a@b.c", subject="s")
            )
            assert isinstance(mail, Accepted)
            view = await due_now(store, await schedule(store, dep_id), time.time() - 1)
            fire = await store.transact(partial(fire_schedule, schedule=view, now=time.time()))
            assert isinstance(fire.outcome, Accepted)
            assert fire.outcome.run_id == mail.run_id and fire.outcome.seq == mail.seq + 1
            tg.cancel_scope.cancel()
