"""The runs of one deployment processed concurrently: each run's items in
its seq order, within the known prefix of seqs, at most
``max_concurrent_runs`` batches at once; a hanging run holds back only
itself; a restart, a takeover and the holds of gates and suspensions keep
working."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import ApprovalRequested, DispatchProcessed, new_id
from runtime.wire import FailurePolicy
from sidecar import Inbox
from sidecar.execution import Runs
from sidecar.storage import Envelope
from tests.support import wait_for
from tests.support.harnesses.sidecar import FAST_RUNS, deployed_sidecar, mail, make_deployment

from .test_gate import decision, held

pytestmark = pytest.mark.anyio

Handler = Callable[[Any, Any], Awaitable[None]]


def env(seq: int, run_id: str) -> Envelope:
    return Envelope(dispatch_id=new_id("dsp"), run_id=run_id, seq=seq, subject=f"s{seq}")


@asynccontextmanager
async def running(
    tmp_path: Path, handler: Handler, *, limit: int = 16, stored: list[Envelope] | None = None
) -> AsyncIterator[tuple[Inbox, Runs]]:
    """Runs over an inbox at ``tmp_path`` (``stored`` in it first), at most
    ``limit`` batches at once."""
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        if stored:
            await inbox.store(stored)
        async with Runs(
            inbox=inbox, deployment_id="dep_x", handler=handler, config=FAST_RUNS
        ) as runs:
            await runs.set_policy(FailurePolicy(handler_timeout=30.0, max_concurrent_runs=limit))
            runs.kick()
            yield inbox, runs
    finally:
        await inbox.aclose()


async def outcomes(inbox: Inbox) -> dict[int, str | None]:
    rows = await inbox.db.read(
        lambda conn: conn.execute("SELECT seq, outcome FROM inbox ORDER BY seq").fetchall()
    )
    return {seq: outcome for seq, outcome in rows}


class Gauge:
    """Handler calls in flight, and the most seen at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.seen: dict[str, list[int]] = defaultdict(list)

    async def call(self, item: Any, wait: Callable[[], Awaitable[None]]) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await wait()
            self.seen[item.run_id].append(item.seq)
        finally:
            self.now -= 1


async def test_a_hanging_run_holds_back_only_itself(tmp_path: Path) -> None:
    release = anyio.Event()

    async def handler(ctx: Any, item: Any) -> None:
        if item.run_id == "run_a":
            await release.wait()

    stored = [env(1, "run_a"), *(env(seq, "run_b") for seq in range(2, 6)), env(6, "run_a")]
    async with running(tmp_path, handler, stored=stored) as (inbox, _):
        await wait_for(lambda: processed(inbox, {2, 3, 4, 5}), what="run_b done while run_a hangs")
        done = await outcomes(inbox)
        assert [done[seq] for seq in (1, 6)] == [None, None]
        assert inbox.last_seq == 0  # seq 1 is not done: the position waits for it
        release.set()
        await wait_for(lambda: inbox.last_seq == 6, what="the position past every seq")
    assert set((await outcomes_after(tmp_path)).values()) == {"processed"}


async def processed(inbox: Inbox, seqs: set[int]) -> bool:
    return seqs <= {seq for seq, outcome in (await outcomes(inbox)).items() if outcome}


async def outcomes_after(tmp_path: Path) -> dict[int, str | None]:
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        return await outcomes(inbox)
    finally:
        await inbox.aclose()


async def test_each_run_keeps_its_order_under_interleaved_seqs(tmp_path: Path) -> None:
    rng = random.Random(7)
    runs_of = [f"run_{rng.randrange(6)}" for _ in range(120)]
    stored = [env(seq, run_id) for seq, run_id in enumerate(runs_of, 1)]
    rng.shuffle(stored)  # arrival order is not seq order
    gauge = Gauge()

    async def handler(ctx: Any, item: Any) -> None:
        await gauge.call(item, lambda: anyio.sleep(rng.random() / 200))

    async with running(tmp_path, handler, limit=4, stored=stored) as (inbox, _):
        await wait_for(lambda: inbox.last_seq == 120, timeout=30, what="every item processed")
    expected: dict[str, list[int]] = defaultdict(list)
    for seq, run_id in enumerate(runs_of, 1):
        expected[run_id].append(seq)
    assert dict(gauge.seen) == dict(expected)
    assert 1 < gauge.most <= 4  # concurrent, within the limit


async def test_the_limit_holds_however_many_runs_are_ready(tmp_path: Path) -> None:
    gate = anyio.Event()
    gauge = Gauge()

    async def handler(ctx: Any, item: Any) -> None:
        await gauge.call(item, gate.wait)

    stored = [env(seq, f"run_{seq}") for seq in range(1, 11)]
    async with running(tmp_path, handler, limit=3, stored=stored) as (inbox, runs):
        await wait_for(lambda: gauge.now == 3, what="three calls in flight")
        await runs.set_policy(FailurePolicy(handler_timeout=30.0, max_concurrent_runs=5))
        runs.kick()
        await wait_for(lambda: gauge.now == 5, what="five in flight under the raised limit")
        gate.set()
        await wait_for(lambda: inbox.last_seq == 10, what="all ten processed")
    assert gauge.most == 5
    assert sorted(seq for seqs in gauge.seen.values() for seq in seqs) == list(range(1, 11))


async def test_a_late_frame_is_not_overtaken_by_a_later_item(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []

    async def handler(ctx: Any, item: Any) -> None:
        calls.append((item.run_id, item.seq))

    late = env(2, "run_a")
    stored = [env(1, "run_a"), env(3, "run_b"), env(4, "run_a")]
    async with running(tmp_path, handler, stored=stored) as (inbox, runs):
        # Seq 2 is unknown: it may be run_b's, or run_a's, so nothing above waits.
        await wait_for(lambda: bool(calls) and runs.idle.is_set(), what="seq 1, then idle")
        assert calls == [("run_a", 1)]
        assert inbox.last_seq == 1
        await inbox.store([late])
        runs.kick()
        await wait_for(lambda: inbox.last_seq == 4, what="the rest, once seq 2 came")
    assert [seq for run_id, seq in calls if run_id == "run_a"] == [1, 2, 4]
    assert sorted(seq for _, seq in calls) == [1, 2, 3, 4]


async def test_a_restart_with_several_runs_in_flight_processes_each_item_once(
    tmp_path: Path,
) -> None:
    gauge = Gauge()
    forever = anyio.Event()

    async def hang(ctx: Any, item: Any) -> None:
        await gauge.call(item, forever.wait)

    stored = [env(seq, f"run_{seq % 3}") for seq in range(1, 10)]
    with anyio.CancelScope() as scope:
        async with running(tmp_path, hang, stored=stored):
            await wait_for(lambda: gauge.now == 3, what="a batch of each run in flight")
            scope.cancel()  # as a stop past its grace: the calls are cut short
    assert set((await outcomes_after(tmp_path)).values()) == {None}

    calls: list[tuple[str, int]] = []

    async def handler(ctx: Any, item: Any) -> None:
        calls.append((item.run_id, item.seq))

    async with running(tmp_path, handler) as (inbox, _):
        await wait_for(lambda: inbox.last_seq == 9, what="every item processed after the restart")
    assert sorted(seq for _, seq in calls) == list(range(1, 10))
    for run in range(3):
        assert [s for r, s in calls if r == f"run_{run}"] == [
            s for s in range(1, 10) if s % 3 == run
        ]


async def test_a_death_with_several_runs_in_flight_makes_suspects_that_run_alone(
    tmp_path: Path,
) -> None:
    a, b, c = env(1, "run_a"), env(2, "run_b"), env(3, "run_c")
    inbox = await Inbox.open(tmp_path / "inbox.db")
    await inbox.store([a, b, c])
    # As a process that died with two runs' batches in flight: nothing
    # else ran, so neither batch of one is charged the death.
    await inbox.mark_in_flight([a.dispatch_id], "run_a")
    await inbox.mark_in_flight([b.dispatch_id], "run_b")
    await inbox.aclose()
    gauge = Gauge()
    alone: dict[int, int] = {}

    async def handler(ctx: Any, item: Any) -> None:
        async def note() -> None:
            alone[item.seq] = gauge.now

        await gauge.call(item, note)

    async with running(tmp_path, handler) as (inbox, _):
        await wait_for(lambda: inbox.last_seq == 3, what="all three processed")
        attempts = await inbox.db.read(
            lambda conn: [
                tuple(row) for row in conn.execute("SELECT seq, attempts FROM inbox ORDER BY seq")
            ]
        )
    assert attempts == [(1, 0), (2, 0), (3, 0)]
    assert alone[1] == 1 and alone[2] == 1  # each suspect alone in the process


async def test_a_takeover_waits_for_the_batches_in_flight(tmp_path: Path) -> None:
    release = anyio.Event()
    gauge = Gauge()
    order: list[str] = []

    async def handler(ctx: Any, item: Any) -> None:
        await gauge.call(item, release.wait)
        ctx.state.setdefault("seen", []).append(item.seq)
        order.append(f"call {item.seq}")

    stored = [env(1, "run_a"), env(2, "run_b")]
    async with running(tmp_path, handler, stored=stored) as (inbox, runs):
        await wait_for(lambda: gauge.now == 2, what="both runs in flight")
        # Stored once the batches are out, so that it is in none of them
        # (else run_a's batch takes it, unless its step budget runs out first).
        await inbox.store([env(3, "run_a")])

        async def adopt() -> None:
            await runs.adopt([], floor=1)
            order.append("adopted")

        async with anyio.create_task_group() as tg:
            tg.start_soon(adopt)
            await anyio.wait_all_tasks_blocked()
            assert order == []  # the takeover waits for the batches in flight
            release.set()
        # Seq 1 is the hub's (at the floor); 2 and 3 are processed anew.
        await wait_for(lambda: inbox.last_seq == 3, what="processed again from the hub's state")
        record = await inbox.load_run("run_a")
    assert order.index("adopted") == 2  # after both calls in flight, before the new ones
    assert record.state == {"seen": [3]}


SLOW_AND_GATED = """
import os

import anyio


async def main(ctx, item):
    ctx.state.setdefault("seen", []).append(item.subject)
    if item.subject == "gate":
        ctx.state["approval"] = await ctx.request_approval("ship it?")
    if item.subject == "slow":
        while not os.path.exists({gate!r}):
            await anyio.sleep(0.01)
"""


async def test_a_gate_holds_while_other_runs_go_on_concurrently(tmp_path: Path) -> None:
    opened = tmp_path / "opened"
    dep = make_deployment(tmp_path / "state", source=SLOW_AND_GATED.format(gate=str(opened)))
    gated, slow, other = new_id("run"), new_id("run"), new_id("run")
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "gate", run_id=gated))
        await hub.wait_events(ApprovalRequested, 1)
        await hub.deliver(mail(dep, 2, "slow", run_id=slow))
        for seq, subject, run_id in ((3, "a", gated), (4, "x", other), (5, "b", gated)):
            await hub.deliver(mail(dep, seq, subject, run_id=run_id))
        await wait_for(lambda: held(dep) == [3, 5], what="the gated run's mails held")
        await hub.wait_events(DispatchProcessed, 2)  # the gate, and the other run's mail
        (asked,) = hub.of_kind(ApprovalRequested)
        await hub.deliver(decision(dep, 6, asked.approval_id, run_id=gated))
        await hub.wait_events(DispatchProcessed, 5)
        assert not [e for e in hub.of_kind(DispatchProcessed) if e.run_id == slow]
        opened.touch()
        await hub.wait_events(DispatchProcessed, 6)
    steps = sorted(
        (e for e in hub.of_kind(DispatchProcessed) if e.run_id == gated), key=lambda e: e.step
    )
    assert steps[-1].state["seen"] == ["gate", "approve", "a", "b"]
    assert held(dep) == []


async def test_the_hubs_floor_over_a_gap_lets_the_rows_behind_it_go(tmp_path: Path) -> None:
    calls: list[int] = []

    async def handler(ctx: Any, item: Any) -> None:
        calls.append(item.seq)

    stored = [env(7, "run_a"), env(8, "run_b"), env(9, "run_a")]
    async with running(tmp_path, handler, stored=stored) as (inbox, runs):
        await wait_for(lambda: runs.idle.is_set(), what="idle: seqs 1 to 6 unknown")
        assert calls == []
        await inbox.raise_floor(6)  # settled elsewhere: never delivered here
        runs.kick()
        await wait_for(lambda: inbox.last_seq == 9, what="the rows above the floor processed")
    assert sorted(calls) == [7, 8, 9]
    assert calls.index(7) < calls.index(9)
