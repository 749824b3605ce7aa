"""The timer table, on either database: what the events of a run set, move
and cancel, what a run's end, a terminate, a delete and a decision drop, and
what one page of the loop fires (``hub.clock.fire_page``): each due row once,
as the item it stands for, in due order; a row whose run ended dropped."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

import msgspec
import pytest

from hub.clock import fire_page
from hub.store import (
    Accepted,
    OutboundStatus,
    Rejected,
    Store,
    Trigger,
    accept_triggers,
    cancel_run,
    claim_timers,
    decision_trigger,
    delete_deployment,
    get_approval,
    get_run,
    open_store,
)
from hub.store.sql import Tx
from hub.wire.events.ingest import Ingest
from hub.wire.retention import DeadLetters
from runtime import ApprovalRequested, Event, RunCompleted, new_id
from runtime.wire import APPROVAL_TIMEOUT, TimerCancelled, TimerFired, TimerSet
from tests.support.harnesses.wire import Dep, deploy
from tests.support.store import rows

pytestmark = pytest.mark.anyio


async def _run(store: Store, dep: Dep) -> str:
    """The deployment's top-level run, minted by a first mail."""
    (receipt,), _ = await store.transact(
        partial(accept_triggers, triggers=[Trigger(address=dep.address, body=b"go")])
    )
    assert isinstance(receipt, Accepted)
    return receipt.run_id


async def _ingest(store: Store, dep: Dep, events: Sequence[Event]) -> bool:
    """The events as a frame of the deployment's sidecar; whether a timer was set."""

    def body(tx: Tx) -> bool:
        ingest = Ingest(tx, dep.id, "events", time.time(), DeadLetters())
        ingest.events(events)
        ingest.route(OutboundStatus.NO_RELAY)
        return ingest.timers_set

    return await store.transact(body)


def _set(run_id: str, name: str, due_at: float, payload: object = None) -> TimerSet:
    return TimerSet(event_id=new_id("evt"), run_id=run_id, name=name, due_at=due_at,
                    payload=payload)  # fmt: skip


async def _timers(store: Store) -> list[tuple[object, ...]]:
    return await rows(store, "SELECT id, run_id, kind, name, due_at FROM timer ORDER BY due_at")


async def test_set_moves_cancels_and_an_ended_run_takes_none(database: str) -> None:
    async with await open_store(database) as store:
        dep = await deploy(store)
        run_id = await _run(store, dep)
        now = time.time()
        first, b = _set(run_id, "a", now + 60, {"k": 1}), _set(run_id, "b", now + 70)
        assert await _ingest(store, dep, [first, b])
        assert [r[0] for r in await _timers(store)] == [first.event_id, b.event_id]
        # Set again: moved, with a new id (a new item) and payload.
        moved = _set(run_id, "a", now + 80, {"k": 2})
        await _ingest(store, dep, [moved])
        found = await _timers(store)
        assert [(r[0], r[3], r[4]) for r in found] == [
            (b.event_id, "b", now + 70),
            (moved.event_id, "a", now + 80),
        ]
        run = await store.read(partial(get_run, run_id=run_id))
        assert [(t.name, t.due_at, t.payload) for t in run.timers] == [
            ("b", now + 70, None),
            ("a", now + 80, {"k": 2}),
        ]
        cancel = TimerCancelled(event_id=new_id("evt"), run_id=run_id, name="b")
        assert not await _ingest(store, dep, [cancel])
        assert [r[3] for r in await _timers(store)] == ["a"]
        # The run's end drops what it has pending, and what comes after takes nothing.
        done = RunCompleted(event_id=new_id("evt"), run_id=run_id, result=1)
        await _ingest(store, dep, [done, _set(run_id, "late", now + 90)])
        assert await _timers(store) == []


async def test_an_approvals_expiry_fires_timeout_once_and_a_decision_drops_it(
    database: str,
) -> None:
    async with await open_store(database) as store:
        dep = await deploy(store)
        run_id = await _run(store, dep)
        now = time.time()
        asks = [
            ApprovalRequested(event_id=new_id("evt"), run_id=run_id, approval_id=new_id("apr"),
                              prompt=p, expires_at=now + s)
            for p, s in (("soon", 1.0), ("later", 1000.0))
        ]  # fmt: skip
        assert await _ingest(store, dep, asks)
        soon, later = (a.approval_id for a in asks)
        view = await store.read(partial(get_approval, approval_id=soon))
        assert (view.expires_at, view.status) == (now + 1.0, "pending")
        assert [r[2:4] for r in await _timers(store)] == [("approval", soon), ("approval", later)]
        # Decided in time: its expiry goes in the decision's transaction.
        (decided,), _ = await store.transact(
            partial(accept_triggers, triggers=[decision_trigger(later, "approve")])
        )
        assert isinstance(decided, Accepted)
        assert [r[3] for r in await _timers(store)] == [soon]
        # Not due yet: nothing fires.
        assert (await store.transact(lambda tx: fire_page(tx, now))).woken == set()
        fired = await store.transact(lambda tx: fire_page(tx, now + 1.5))
        assert fired.woken == {dep.id}
        assert await _timers(store) == []
        view = await store.read(partial(get_approval, approval_id=soon))
        assert (view.status, view.decision) == ("decided", APPROVAL_TIMEOUT)
        item = await rows(
            store, "SELECT kind, subject, message_id FROM workflow_run_dispatch"
            " WHERE run_id = ? AND subject = ?", run_id, APPROVAL_TIMEOUT,
        )  # fmt: skip
        assert item == [("approval", "timeout", f"approval:{soon}:timeout")]
        # A decision after the timeout is refused.
        (late,), _ = await store.transact(
            partial(accept_triggers, triggers=[decision_trigger(soon, "approve")])
        )
        assert isinstance(late, Rejected) and late.reason == "approval_decided"


async def test_due_rows_fire_once_in_due_order_and_an_ended_runs_never(database: str) -> None:
    async with await open_store(database) as store:
        dep, other = await deploy(store, "one"), await deploy(store, "two")
        run_id, ended = await _run(store, dep), await _run(store, other)
        now = time.time()
        # Set in an order that is not the due order; one due in the past.
        sets = [_set(run_id, f"t{i}", now + d, {"i": i}) for i, d in ((2, 0.3), (0, -5), (1, 0.2))]
        await _ingest(store, dep, [*sets, _set(run_id, "future", now + 3600)])
        await _ingest(store, other, [_set(ended, "x", now - 1)])
        # The other run ends by a terminate: its timer goes with it.
        await store.transact(partial(cancel_run, run_id=ended, reason="r", terminate=True))
        assert [r[3] for r in await _timers(store)] == ["t0", "t1", "t2", "future"]
        fired_at = now + 1
        fired = await store.transact(lambda tx: fire_page(tx, fired_at))
        assert (fired.woken, len(fired.lateness), fired.full) == ({dep.id}, 3, False)
        items = await rows(
            store, "SELECT kind, subject, message_id, body FROM workflow_run_dispatch"
            " WHERE run_id = ? AND kind = 'timer' ORDER BY seq", run_id,
        )  # fmt: skip
        by_name = {s.name: s for s in sets}
        assert [(k, s, m) for k, s, m, _ in items] == [
            ("timer", n, f"timer:{by_name[n].event_id}") for n in ("t0", "t1", "t2")
        ]
        bodies = [msgspec.json.decode(bytes(b), type=TimerFired) for *_, b in items]
        assert bodies == [
            TimerFired(name=n, due_at=by_name[n].due_at, fired_at=fired_at, payload={"i": i})
            for i, n in enumerate(("t0", "t1", "t2"))
        ]
        # Fired rows are gone: a second round (another hub's) finds nothing.
        assert [r[3] for r in await _timers(store)] == ["future"]
        again = await store.transact(lambda tx: fire_page(tx, fired_at))
        assert (again.woken, again.lateness) == (set(), [])
        assert (
            await store.transact(partial(claim_timers, timer_ids=[s.event_id for s in sets]))
            == set()
        )


async def test_a_deleted_deployment_drops_its_timers(database: str) -> None:
    async with await open_store(database) as store:
        dep, kept = await deploy(store, "gone"), await deploy(store, "kept")
        run_id, kept_run = await _run(store, dep), await _run(store, kept)
        await _ingest(store, dep, [_set(run_id, "a", time.time() + 60)])
        await _ingest(store, kept, [_set(kept_run, "b", time.time() + 60)])
        assert await delete_deployment(store, dep.id)
        assert [r[1:4] for r in await _timers(store)] == [(kept_run, "timer", "b")]
