"""The steps a new owner takes over (hub/store/delivery/run_steps.py), on
each store: the latest record of each step of a run's open or parked
dispatches, without the failures a park or a suspension made stale."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pytest

from hub.store import Trigger, accept_triggers, open_store, read_state_page
from hub.wire.events.ingest import Ingest
from hub.wire.retention import DeadLetters
from runtime import DispatchProcessed, Event, new_id
from runtime.wire import RunSuspended, StepRecorded
from tests.support.harnesses.wire import deploy

pytestmark = pytest.mark.anyio


def step(r: Any, name: str, result: Any = None, error: str | None = None) -> StepRecorded:
    return StepRecorded(
        event_id=new_id("evt"),
        run_id=r.run_id,
        dispatch_id=r.dispatch_id,
        name=name,
        index=1,
        result=result,
        error=error,
    )


def done(r: Any, outcome: str) -> DispatchProcessed:
    return DispatchProcessed(
        event_id=new_id("evt"),
        run_id=r.run_id,
        dispatch_id=r.dispatch_id,
        seq=r.seq,
        step=r.seq,
        outcome=outcome,
    )


async def test_the_steps_of_open_and_parked_dispatches_without_stale_failures(
    database: str,
) -> None:
    async with await open_store(database) as store:
        dep = await deploy(store)
        triggers = [Trigger(address=dep.address, body=b"%d" % i) for i in range(4)]
        receipts, _ = await store.transact(partial(accept_triggers, triggers=triggers))
        processed, parked, suspended, open_ = receipts
        events: list[Event] = [
            step(processed, "gone", 1),
            done(processed, "processed"),
            step(parked, "ok", 2),
            step(parked, "bad", error="E: parked"),
            done(parked, "parked"),
            step(suspended, "bad", error="E: suspended"),
            RunSuspended(
                event_id=new_id("evt"),
                run_id=suspended.run_id,
                dispatch_id=suspended.dispatch_id,
                attempts=2,
            ),
            step(open_, "first", error="E: first"),
            step(open_, "first", {"again": True}),
            step(open_, "current", error="E: current"),
        ]
        await store.transact(
            lambda tx: Ingest(tx, dep.id, "events", time.time(), DeadLetters()).events(events)
        )
        page = await store.read(
            partial(read_state_page, deployment_id=dep.id, after_run_id="", runs=10, settled=10)
        )
    (steps,) = page.steps.values()
    assert [(s.dispatch_id, s.name, s.result, s.error) for s in steps] == [
        (parked.dispatch_id, "ok", 2, None),
        (open_.dispatch_id, "first", {"again": True}, None),
        (open_.dispatch_id, "current", None, "E: current"),
    ]
