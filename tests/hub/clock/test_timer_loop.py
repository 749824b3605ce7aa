"""The timer loop on a real SQLite file: it fires a due timer within a second
on an idle hub, 10,000 timers due in the same second each once and each
run's in order, survives a store that fails, and with 100,000 timers
pending and none due it reads the store once per wake, never polling."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
import pytest

from hub._errors import StoreUnavailable
from hub.clock import TimerLoop
from hub.metrics import HubMetrics
from hub.store import Accepted, Store, Trigger, accept_triggers, open_store, set_timer
from hub.store.sql import Tx
from runtime.wire import TimerFired
from tests.support import wait_for
from tests.support.harnesses.wire import deploy
from tests.support.store import rows

pytestmark = pytest.mark.anyio

T = TypeVar("T")


class FlakyStore:
    """A store whose first ``failures`` reads fail as an unreachable one does."""

    def __init__(self, store: Store, failures: int) -> None:
        self.store = store
        self.failures = failures

    async def read(self, body: Callable[[Tx], T], **kw: Any) -> T:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("database is locked")
        return await self.store.read(body, **kw)

    async def transact(self, body: Callable[[Tx], T], **kw: Any) -> T:
        return await self.store.transact(body, **kw)


async def _runs(store: Store, count: int) -> list[tuple[str, str]]:
    """``count`` deployments' top-level runs: (deployment id, run id)."""
    found = []
    for i in range(count):
        dep = await deploy(store, f"d{i}")
        (receipt,), _ = await store.transact(
            partial(accept_triggers, triggers=[Trigger(address=dep.address, body=b"go")])
        )
        assert isinstance(receipt, Accepted)
        found.append((dep.id, receipt.run_id))
    return found


def _set_many(tx: Tx, timers: list[tuple[str, str, str, float]], now: float) -> None:
    for timer_id, dep_id, run_id, due_at in timers:
        name = timer_id.split(":")[-1]
        payload = b'{"n":"%s"}' % name.encode()
        set_timer(tx, timer_id=timer_id, deployment_id=dep_id, run_id=run_id, kind="timer",
                  name=name, due_at=due_at, payload=payload, now=now)  # fmt: skip


@asynccontextmanager
async def running(loop: TimerLoop) -> AsyncIterator[set[str]]:
    """The loop in a task group; yields the deployments it woke."""
    woken: set[str] = set()
    loop.on_fired = woken.update
    async with anyio.create_task_group() as tg:
        await tg.start(loop.run)
        yield woken
        tg.cancel_scope.cancel()


async def _pending(store: Store) -> int:
    return int((await rows(store, "SELECT COUNT(*) FROM timer"))[0][0])


async def _none_pending(store: Store) -> bool:
    return await _pending(store) == 0


async def test_a_timer_fires_within_a_second_of_due_on_an_idle_hub(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        ((dep_id, run_id),) = await _runs(store, 1)
        metrics = HubMetrics()
        loop = TimerLoop(store, metrics=metrics)
        async with running(loop) as woken:
            # Idle: nothing pending, the loop waits for a wake.
            due_at = time.time() + 0.5
            now = time.time()
            await store.transact(lambda tx: _set_many(tx, [("t:a", dep_id, run_id, due_at)], now))
            loop.wake()
            await wait_for(lambda: woken, timeout=5, what="the timer fired")
        ((body, created_at),) = await rows(
            store,
            "SELECT body, created_at FROM workflow_run_dispatch WHERE kind = 'timer'"
            " AND run_id = ?",
            run_id,
        )
        fired = msgspec.json.decode(bytes(body), type=TimerFired)
        assert (fired.name, fired.due_at, fired.payload) == ("a", due_at, {"n": "a"})
        assert 0 <= fired.fired_at - due_at < 1.0
        assert created_at - due_at < 1.0
        assert woken == {dep_id}
        assert "mailrun_timers_fired_total 1" in metrics.render()
        assert "mailrun_timers_late_total 0" in metrics.render()


async def test_ten_thousand_timers_due_in_one_second_fire_once_each_run_in_order(
    tmp_path: Path,
) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        runs = await _runs(store, 100)
        base = time.time() + 0.5
        # Each run's 100 timers spread over the same second, set in reverse.
        timers = [
            (f"t:{run_id}:{j:03d}", dep_id, run_id, base + j / 100 + i / 10_000)
            for i, (dep_id, run_id) in enumerate(runs)
            for j in reversed(range(100))
        ]
        now = time.time()
        await store.transact(lambda tx: _set_many(tx, timers, now))
        loop = TimerLoop(store)
        started = time.monotonic()
        async with running(loop) as woken:
            await wait_for(
                lambda: _none_pending(store), timeout=60, interval=0.05, what="every timer fired"
            )
        elapsed = time.monotonic() - started
        assert woken == {dep_id for dep_id, _ in runs}
        fired = await rows(
            store,
            "SELECT run_id, subject, message_id FROM workflow_run_dispatch WHERE kind = 'timer'"
            " ORDER BY run_id, seq",
        )
        assert len(fired) == 10_000
        assert len({m for *_, m in fired}) == 10_000
        by_run: dict[str, list[str]] = {}
        for run_id, subject, _ in fired:
            by_run.setdefault(run_id, []).append(subject)
        assert by_run == {run_id: [f"{j:03d}" for j in range(100)] for _, run_id in runs}
        assert elapsed < 30, elapsed


async def test_a_failing_store_is_waited_out_and_the_timer_still_fires(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        ((dep_id, run_id),) = await _runs(store, 1)
        now = time.time()
        await store.transact(lambda tx: _set_many(tx, [("t:x", dep_id, run_id, now - 1)], now))
        flaky = FlakyStore(store, failures=3)
        loop = TimerLoop(flaky)  # type: ignore[arg-type]
        async with running(loop) as woken:
            await wait_for(lambda: woken, timeout=10, what="the timer fired after the outage")
        # Its three failures were each waited out; the error is cleared once
        # a round went through again.
        assert flaky.failures == 0
        assert loop.last_error is None
        assert await _pending(store) == 0


async def test_many_pending_timers_cost_one_read_per_wake(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        ((dep_id, run_id),) = await _runs(store, 1)
        later = time.time() + 3600
        timers = [(f"t:{i:06d}", dep_id, run_id, later + i) for i in range(100_000)]
        now = time.time()
        await store.transact(lambda tx: _set_many(tx, timers, now), heavy=True)
        loop = TimerLoop(store)
        async with running(loop):
            await wait_for(lambda: loop.reads >= 1, timeout=5, what="the first look")
            # A window with nothing due: a loop that polls (every 0.2 s or
            # sooner) or spins reads again within it. Absence is only seen
            # over time, so these two windows are the test.
            await anyio.sleep(0.2)
            assert loop.reads == 1
            for wakes in range(1, 4):
                loop.wake()
                looked = partial(lambda n: loop.reads >= n, 1 + wakes)
                await wait_for(looked, timeout=5, what="a look per wake")
            await anyio.sleep(0.1)  # a wake read twice does so within milliseconds
            assert loop.reads == 4
        assert await _pending(store) == 100_000
