"""Scale to zero, the sidecar's part (sidecar/_sleep.py): idle for
``idle_stop`` seconds it stops taking deliveries and asks the hub to sleep;
Asleep stops it. A real nats-server and real inbox files; the hub is the
scripted one of tests/support/harnesses/sidecar.py, with a stub answering
``hub.sleep.<dep>`` (tests/sidecar/sleep/sleeping.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from runtime import (
    DispatchProcessed,
    Reason,
    Refused,
    TransportError,
)
from runtime.wire import FailurePolicy, OnFailure, RunSuspended
from tests.sidecar.sleep.sleeping import IDLE, hub_and_desk, idle_for, inbox_ids, processed, serving
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.sidecar import (
    mail,
    make_deployment,
)

FLAKY = """
CALLS = {"n": 0}


async def main(ctx, item):
    if item.subject == "flaky" and CALLS["n"] < 4:
        CALLS["n"] += 1
        raise RuntimeError("not yet")
    ctx.state["seen"] = ctx.state.get("seen", 0) + 1
"""


@pytest.mark.anyio
async def test_asks_after_its_idle_time_and_stops_on_asleep(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        async with serving(nats_server, dep) as (car, ended):
            desk.look = lambda: (processed(hub), idle_for(car) >= IDLE)
            assert (await hub.deliver(mail(dep, 1, "one"))).result == "stored"
            with anyio.fail_after(10):
                await ended.wait()
            assert car.asleep
        assert len(desk.asks) == 1 and desk.seen == [(1, True)]
        session = hub.welcomes[-1]
        assert (desk.asks[0].session_id, desk.asks[0].owner_epoch) == (
            session.session_id,
            session.owner_epoch,
        )
    assert dep.query("SELECT state FROM inbox") == [("done",)]


@pytest.mark.anyio
async def test_does_not_ask_while_events_wait_for_the_hub(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    # Refused six times: the shipper's backoff leaves gaps longer than the
    # idle time with no request in flight, the outbox not empty.
    async with hub_and_desk(nats_server, dep, refuse_events=["store_unavailable"] * 6) as (
        hub,
        desk,
    ):
        desk.look = lambda: (len(hub.refuse_events), processed(hub))
        async with serving(nats_server, dep) as (car, ended):
            assert (await hub.deliver(mail(dep, 1, "one"))).result == "stored"
            with anyio.fail_after(20):
                await ended.wait()
            assert car.sleeper is not None and car.sleeper.declined >= 1
        assert desk.seen == [(0, 1)]


@pytest.mark.anyio
async def test_does_not_ask_while_an_item_waits_for_its_retry(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state", source=FLAKY)
    # Four failures: retries after about 0.1, 0.2, 0.4 and 0.8 s (jittered
    # down to half), the last ones longer than the idle time.
    policy = FailurePolicy(
        on_failure=OnFailure.FAIL, max_attempts=10, max_backoff=2.0, handler_timeout=5.0
    )
    async with hub_and_desk(nats_server, dep, policy=policy) as (hub, desk):
        desk.look = lambda: processed(hub)
        async with serving(nats_server, dep, idle_stop=0.15) as (car, ended):
            assert (await hub.deliver(mail(dep, 1, "flaky"))).result == "stored"
            with anyio.fail_after(20):
                await ended.wait()
            assert car.sleeper is not None and car.sleeper.declined >= 1
        assert desk.seen == [1]
    assert dep.query("SELECT state, attempts FROM inbox") == [("done", 4)]


@pytest.mark.anyio
async def test_does_not_ask_while_an_item_is_pending(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        desk.look = lambda: processed(hub)
        async with serving(nats_server, dep) as (car, ended):
            # Seq 2 without seq 1: stored, and waits for the seq before it.
            assert (await hub.deliver(mail(dep, 2, "two", run_id="run_b"))).result == "stored"
            sleeper = car.sleeper
            assert sleeper is not None
            await wait_for(lambda: sleeper.declined >= 2, what="two idle clocks run out")
            assert desk.asks == [] and processed(hub) == 0
            assert (await hub.deliver(mail(dep, 1, "one", run_id="run_a"))).result == "stored"
            with anyio.fail_after(10):
                await ended.wait()
        assert desk.seen == [2]


@pytest.mark.anyio
async def test_a_suspended_run_holding_its_items_sleeps_until_the_resume_wakes_it(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    fixed = tmp_path / "fixed"
    source = f"""
import os


async def main(ctx, item):
    if item.subject == "poison" and not os.path.exists({str(fixed)!r}):
        raise ValueError("poisoned mail")
"""
    dep = make_deployment(tmp_path / "state", source=source)
    policy = FailurePolicy(
        on_failure=OnFailure.SUSPEND, max_attempts=1, max_backoff=0.02, handler_timeout=5.0
    )
    states = lambda: sorted(dep.query("SELECT state FROM inbox"))  # noqa: E731
    async with hub_and_desk(nats_server, dep, policy=policy) as (hub, desk):
        desk.look = lambda: (processed(hub), states())
        async with serving(nats_server, dep) as (car, ended):
            assert (await hub.deliver(mail(dep, 1, "poison"))).result == "stored"
            # Only a new dispatch (the resume) lets the row go: nothing to stay awake for.
            with anyio.fail_after(10):
                await ended.wait()
            assert car.asleep
        assert len(hub.of_kind(RunSuspended)) == 1
        assert desk.seen == [(0, [("held",)])]
        fixed.touch()
        # The hub wakes the deployment for the resume: the next process takes
        # it, and the row it released, then sleeps again.
        async with serving(nats_server, dep) as (car, ended):
            resume = mail(dep, 2, "", b"", kind="resume")
            assert (await hub.deliver(resume)).result == "stored"
            with anyio.fail_after(10):
                await ended.wait()
            assert car.asleep
        assert desk.seen[1:] == [(2, [("done",), ("done",)])]


@pytest.mark.anyio
async def test_busy_takes_deliveries_again_and_asks_again_later(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        desk.answers = [Refused(reason=Reason.BUSY)]
        async with serving(nats_server, dep, backoff_max=0.5) as (car, ended):
            desk.look = lambda: (processed(hub), idle_for(car) >= IDLE)
            await wait_for(lambda: len(desk.asks) == 1, what="the first ask")
            await wait_for(lambda: car.link is not None and car.link.activity.taking)
            assert (await hub.deliver(mail(dep, 1, "after busy"))).result == "stored"
            with anyio.fail_after(10):
                await ended.wait()
            assert car.asleep
        # Each after an idle time: the clock started again after the mail.
        assert desk.seen == [(0, True), (1, True)]
    assert dep.query("SELECT state FROM inbox") == [("done",)]


@pytest.mark.anyio
async def test_mail_at_the_closed_door_is_stored_once_the_hub_says_busy(
    tmp_path: Path, nats_server: NatsServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """The hub refuses a Sleep ``busy`` because its dispatch was sent while
    the door was closed: that frame is answered once the door opens, not
    left for the hub's request to time out and send again."""
    caplog.set_level(logging.INFO, logger="mailrun.sidecar.delivery")
    dep = make_deployment(tmp_path / "state")
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        desk.hold = anyio.Event()
        desk.answers = [Refused(reason=Reason.BUSY)]  # then Asleep
        late = mail(dep, 1, "late")
        acks: list[str] = []

        async def deliver() -> None:
            # Unanswered, the request would time out: the frame dropped.
            acks.append((await hub.deliver(late, timeout=5.0)).result)

        async with serving(nats_server, dep) as (car, ended):
            desk.look = lambda: (processed(hub), inbox_ids(dep))
            await wait_for(lambda: len(desk.asks) == 1, what="the ask")
            async with anyio.create_task_group() as tg:
                tg.start_soon(deliver)
                await wait_for(
                    lambda: any("asking to sleep" in r.getMessage() for r in caplog.records),
                    what="the frame at the closed door",
                )
                assert late.dispatch_id not in inbox_ids(dep)  # not stored while closed
                desk.hold.set()  # busy
            assert acks == ["stored"]
            with anyio.fail_after(10):
                await ended.wait()  # idle again: the second ask is granted
            assert car.asleep
        assert desk.seen == [(0, set()), (1, {late.dispatch_id})]
        assert processed(hub) == 1
    assert dep.query("SELECT dispatch_id, state FROM inbox") == [(late.dispatch_id, "done")]


@pytest.mark.anyio
async def test_a_delivery_after_the_ask_is_left_for_the_next_process(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        desk.hold = anyio.Event()
        late = mail(dep, 1, "late")
        async with serving(nats_server, dep) as (car, ended):
            await wait_for(lambda: len(desk.asks) == 1, what="the ask")
            with pytest.raises((TimeoutError, TransportError)):
                await hub.deliver(late, timeout=0.5)  # neither stored nor answered
            assert late.dispatch_id not in inbox_ids(dep)
            desk.hold.set()
            with anyio.fail_after(10):
                await ended.wait()
            assert car.asleep
        assert late.dispatch_id not in inbox_ids(dep)
        # The next process takes it (the hub delivers it again).
        async with serving(nats_server, dep, idle_stop=0):
            assert (await hub.deliver(late)).result == "stored"
            await hub.wait_events(DispatchProcessed, 1)
    assert dep.query("SELECT dispatch_id, state FROM inbox") == [(late.dispatch_id, "done")]


@pytest.mark.anyio
async def test_a_nudge_that_finds_it_busy_makes_it_ask_once_its_work_is_done(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    # Its events refused until the test says: busy when nudged.
    async with hub_and_desk(nats_server, dep, refuse_events=["store_unavailable"] * 1000) as (
        hub,
        desk,
    ):
        # An hour of idle time: only the nudge makes it ask.
        async with serving(nats_server, dep, idle_stop=3600, backoff_max=0.1) as (car, ended):
            desk.look = lambda: processed(hub)
            assert (await hub.deliver(mail(dep, 1, "one"))).result == "stored"
            await wait_for(lambda: hub.batches >= 2, what="events refused")
            car.nudge()
            refused = hub.batches
            await wait_for(lambda: hub.batches >= refused + 1, what="refused again")
            assert desk.asks == [] and not ended.is_set()  # busy: not yet
            hub.refuse_events.clear()  # its work ends within the nudge's second
            with anyio.fail_after(10):
                await ended.wait()
            assert car.asleep
        assert len(desk.asks) == 1 and desk.seen == [1]
    assert dep.query("SELECT state FROM inbox") == [("done",)]


@pytest.mark.anyio
async def test_no_idle_time_never_asks(tmp_path: Path, nats_server: NatsServerProcess) -> None:
    dep = make_deployment(tmp_path / "state")
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        async with serving(nats_server, dep, idle_stop=0) as (car, _):
            assert car.sleeper is None
            car.nudge()  # SIGUSR1 without an idle time: nothing
            for seq in (1, 2):
                assert (await hub.deliver(mail(dep, seq, "one"))).result == "stored"
                await hub.wait_events(DispatchProcessed, seq)
            assert not car.asleep
        assert desk.asks == []


@pytest.mark.anyio
async def test_a_hello_that_crosses_the_ask_keeps_it_awake(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        desk.hold = anyio.Event()
        async with serving(nats_server, dep, backoff_max=0.5) as (car, ended):
            assert car.link is not None
            await wait_for(lambda: len(desk.asks) == 1, what="the ask")
            # A hello goes out (unanswered for now) while the Sleep waits.
            hub.silent_hellos = True
            car.link.rehello()
            await wait_for(lambda: len(hub.hellos) >= 3, what="the hello")  # 2: the first
            desk.hold.set()  # granted: Asleep, but the hello's Welcome will wake it
            await wait_for(lambda: car.link is not None and car.link.activity.taking)
            assert not ended.is_set() and not car.asleep
            hub.silent_hellos = False
            with anyio.fail_after(10):
                await ended.wait()  # welcomed again, idle again, asleep
            assert car.asleep
        assert len(desk.asks) == 2 and len(hub.welcomes) == 2
        assert desk.asks[1].session_id == hub.welcomes[-1].session_id
