"""The hub's state for a new owner carries the steps recorded for each run's
open or parked dispatches (``RunSnapshot.steps``): the latest record of
each, none of a processed dispatch, no failure that a park or a suspension
made stale (a retry or a resume tries it again); and a page never passes
``MAX_FRAME_BYTES``, giving a run the steps that fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hub.store import retry_dispatch
from runtime import EventsAck, RunStates, StateGet, Welcome, encode, new_id
from runtime.wire import MAX_FRAME_BYTES, RunSuspended, StepRecorded
from tests.support.harnesses.wire import Hub, Sidecar, accept, deploy, processed, running_hub, send

pytestmark = pytest.mark.anyio

HOME_A = "home_" + "a" * 26
HOME_B = "home_" + "b" * 26


def step(
    run_id: str, dispatch_id: str, name: str, result: Any = None, error: str | None = None
) -> StepRecorded:
    return StepRecorded(
        event_id=new_id("evt"),
        run_id=run_id,
        dispatch_id=dispatch_id,
        name=name,
        index=1,
        result=result,
        error=error,
    )


async def states(hub: Hub, dep: Any, home: str = HOME_B) -> tuple[RunStates, Sidecar]:
    """The first page a sidecar in another ``home`` gets once it took over, and that sidecar."""
    new = Sidecar(hub, dep, home=home)
    welcome = await new.hello(takeover=True)
    assert isinstance(welcome, Welcome) and welcome.from_hub
    get = StateGet(
        deployment_id=dep.id, session_id=welcome.session_id, owner_epoch=welcome.owner_epoch
    )
    page = await new.request(hub.subjects.state, get)
    assert isinstance(page, RunStates)
    return page, new


async def test_a_new_owner_gets_the_latest_steps_of_the_dispatches_not_settled(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        done, open_, parked = await accept(hub, dep, [b"m1", b"m2", b"m3"])
        run_id = done.run_id
        old = Sidecar(hub, dep, home=HOME_A)
        assert isinstance(await old.hello(), Welcome)
        events = [
            step(run_id, done.dispatch_id, "settled", 1),
            processed(done, state={"n": 1}, step=1),
            step(run_id, open_.dispatch_id, "a", {"x": 1}),
            step(run_id, open_.dispatch_id, "b", error="ValueError: no"),
            step(run_id, open_.dispatch_id, "b", {"x": 2}),  # tried again after a resume
            step(run_id, open_.dispatch_id, "c", error="ValueError: no"),
            step(run_id, parked.dispatch_id, "ok", 3),
            step(run_id, parked.dispatch_id, "bad", error="ValueError: no"),
            processed(parked, state={"n": 1}, step=2, outcome="parked", error="E"),
        ]
        assert isinstance(await send(old, *events), EventsAck)
        page, owner = await states(hub, dep)
        (run,) = page.runs
        got = [(s.dispatch_id, s.name, s.result, s.error) for s in run.steps]
        assert got == [
            (open_.dispatch_id, "a", {"x": 1}, None),
            (open_.dispatch_id, "b", {"x": 2}, None),
            (open_.dispatch_id, "c", None, "ValueError: no"),  # current: the item's attempts
            (parked.dispatch_id, "ok", 3, None),  # "bad" was parked with it: a retry tries it
        ]
        # Retried, the parked dispatch is open again: the same. Then the run
        # is suspended on the open one: its failures go (a resume tries them).
        await hub.store.transact(lambda tx: retry_dispatch(tx, parked.dispatch_id))
        suspended = RunSuspended(
            event_id=new_id("evt"), run_id=run_id, dispatch_id=open_.dispatch_id, attempts=2
        )
        assert isinstance(await send(owner, suspended), EventsAck)
        (run,) = (await states(hub, dep, home="home_" + "c" * 26))[0].runs
        assert [(s.name, s.error) for s in run.steps] == [("a", None), ("b", None), ("ok", None)]


async def test_a_page_gives_a_run_the_steps_that_fit_in_a_frame(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        (receipt,) = await accept(hub, dep, [b"m1"])
        old = Sidecar(hub, dep, home=HOME_A)
        assert isinstance(await old.hello(), Welcome)
        big = "x" * (200 * 1024)
        for i in range(6):  # 1.2 MB of results: one frame each
            one = step(receipt.run_id, receipt.dispatch_id, f"s{i}", big)
            assert isinstance(await send(old, one), EventsAck)
        page, _ = await states(hub, dep)
        assert len(encode(page)) <= MAX_FRAME_BYTES
        (run,) = page.runs
        assert [s.name for s in run.steps] == ["s0", "s1", "s2"]
