"""Scale to zero, the sidecar's part (sidecar/_sleep.py): idle for
``idle_stop`` seconds it stops taking deliveries and asks the hub to sleep;
Asleep stops it. A real nats-server and real inbox files; the hub is the
scripted one of tests/support/sidecar.py, with a stub answering
``hub.sleep.<dep>`` here."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import psutil
import pytest

from hub.store import create_deployment, deployments_to_wake
from runtime import (
    FINAL_EXIT_NOTE,
    Asleep,
    DispatchProcessed,
    FrameDecoder,
    Reason,
    Refused,
    SidecarExit,
    Sleep,
    Subjects,
    Transport,
    TransportError,
    encode,
    open_nats,
    record_path,
    write_restore_record,
)
from runtime.sidecar_contract import decode_restore_record
from runtime.wire import FailurePolicy, OnFailure, RunSuspended, unb64url
from sidecar import Sidecar, SidecarOptions
from tests.sidecar.test_process import exited, sidecar_process
from tests.support import NatsServerProcess, wait_for
from tests.support.sidecar import (
    FAST_RUNS,
    Deployment,
    FakeHub,
    fake_hub_on,
    mail,
    make_deployment,
)
from tests.support.wire import Dep, accept, running_hub

IDLE = 0.3
"""The idle time of these tests' sidecars (seconds)."""

FLAKY = """
CALLS = {"n": 0}


async def main(ctx, item):
    if item.subject == "flaky" and CALLS["n"] < 4:
        CALLS["n"] += 1
        raise RuntimeError("not yet")
    ctx.state["seen"] = ctx.state.get("seen", 0) + 1
"""


@dataclass
class SleepDesk:
    """Answers ``hub.sleep.<dep>`` from a script (Asleep once it runs out),
    and keeps what each ask found (``look``, called as it comes in)."""

    transport: Transport
    dep: Deployment
    answers: list[Any] = field(default_factory=list)
    look: Callable[[], Any] = lambda: None
    hold: anyio.Event | None = None
    """The next answer waits for it (then it is dropped)."""
    asks: list[Sleep] = field(default_factory=list)
    seen: list[Any] = field(default_factory=list)
    """What ``look`` returned at each ask."""

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        decoder: FrameDecoder[Sleep] = FrameDecoder(Sleep)
        subject = Subjects(deployment_id=self.dep.id).sleep
        sub = await self.transport.subscribe(subject)
        task_status.started()
        async for message in sub:
            self.asks.append(decoder.decode(message.data))
            self.seen.append(self.look())
            if self.hold is not None:
                await self.hold.wait()
                self.hold = None
            answer = self.answers.pop(0) if self.answers else Asleep(deployment_id=self.dep.id)
            await message.respond(encode(answer))


@asynccontextmanager
async def hub_and_desk(
    nats: NatsServerProcess, dep: Deployment, **hub: Any
) -> AsyncIterator[tuple[FakeHub, SleepDesk]]:
    async with (
        open_nats(nats.url, name="fake hub") as transport,
        fake_hub_on(transport, dep, **hub) as fake,
        anyio.create_task_group() as tg,
    ):
        desk = SleepDesk(transport, dep)
        await tg.start(desk.serve)
        yield fake, desk
        tg.cancel_scope.cancel()


@asynccontextmanager
async def serving(
    nats: NatsServerProcess, dep: Deployment, *, idle_stop: float = IDLE, **kw: Any
) -> AsyncIterator[tuple[Sidecar, anyio.Event]]:
    """``dep``'s Sidecar on the real server, in session; the event is set when
    its ``run`` has returned (an Asleep stops it by itself)."""
    options = SidecarOptions(
        state_dir=dep.state_dir,
        deployment_id=dep.id,
        nats_url=nats.url,
        runs=FAST_RUNS,
        idle_stop=idle_stop,
        **kw,
    )
    car = Sidecar(options)
    ended = anyio.Event()

    async def run() -> None:
        try:
            await car.run()
        finally:
            ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await wait_for(lambda: car.link is not None and car.link.session is not None)
        yield car, ended
        car.stop()


def processed(hub: FakeHub) -> int:
    return len(hub.of_kind(DispatchProcessed))


def idle_for(car: Sidecar) -> float:
    """Seconds since the sidecar's last work ended (its ask itself is work
    still in progress while the desk looks)."""
    assert car.link is not None
    return anyio.current_time() - car.link.activity.last


def inbox_ids(dep: Deployment) -> set[str]:
    return {row[0] for row in dep.query("SELECT dispatch_id FROM inbox")}


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
async def test_does_not_ask_while_a_suspended_run_holds_its_items(
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
    async with hub_and_desk(nats_server, dep, policy=policy) as (hub, desk):
        desk.look = lambda: processed(hub)
        async with serving(nats_server, dep) as (car, ended):
            assert (await hub.deliver(mail(dep, 1, "poison"))).result == "stored"
            await hub.wait_events(RunSuspended, 1)
            sleeper = car.sleeper
            assert sleeper is not None
            await wait_for(lambda: sleeper.declined >= 2, what="two idle clocks run out")
            assert desk.asks == [] and dep.query("SELECT state FROM inbox") == [("held",)]
            fixed.touch()
            resume = mail(dep, 2, "", b"", kind="resume")
            assert (await hub.deliver(resume)).result == "stored"
            with anyio.fail_after(10):
                await ended.wait()
        assert desk.seen == [2]  # the resume and the item it released


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


# --- against the hub's own hub.sleep handler ------------------------------------


@pytest.mark.anyio
async def test_the_hub_puts_it_to_sleep_and_keeps_its_mail_for_the_next_process(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with (
        open_nats(nats_server.url, name="hub") as bus,
        running_hub(tmp_path, transport=bus) as hub,
    ):
        created = await create_deployment(
            hub.store,
            name="flow",
            source="async def main(ctx, item):\n    ctx.state['n'] = ctx.state.get('n', 0) + 1\n",
            domain="mailrun.local",
            nats_url=nats_server.url,
            subject_prefix="mailrun",
        )
        record, _ = decode_restore_record(unb64url(created.join_token))
        state = tmp_path / "sidecar"
        write_restore_record(record_path(state, record.deployment_id), record)
        assert record.public_key is not None
        dep = Deployment(
            record.deployment_id, record.address, record.hub_key.seed, record.public_key, state
        )
        wired = Dep(dep.id, dep.address, dep.seed, dep.public_key)

        async def asleep() -> bool:
            row = await hub.one("SELECT 1 FROM deployment_sleep WHERE deployment_id = ?", dep.id)
            return row is not None

        async with serving(nats_server, dep) as (car, ended):
            await accept(hub, wired, [b"one"])
            with anyio.fail_after(10):
                await ended.wait()
            assert car.asleep and car.sleeper is not None and car.sleeper.asks == 1
        assert await asleep()
        assert hub.wire.sessions.current(dep.id) is None
        assert dep.query("SELECT state FROM inbox") == [("done",)]
        # Mail for the sleeper waits at the hub, which names it to wake.
        await accept(hub, wired, [b"two"])
        assert await hub.store.transact(deployments_to_wake) == [dep.id]
        async with serving(nats_server, dep, idle_stop=0):
            await wait_for(lambda: len(dep.query("SELECT 1 FROM inbox WHERE state = 'done'")) == 2)
            assert not await asleep()  # its Welcome woke it


# --- python -m sidecar: the exit, and SIGUSR1 -----------------------------------


def _argv(dep: Deployment, nats: NatsServerProcess, *extra: str) -> list[str]:
    return ["--state-dir", str(dep.state_dir), "--nats", nats.url, *extra]


@pytest.mark.slow  # a real `python -m sidecar`
@pytest.mark.anyio
async def test_the_process_exits_asleep_with_its_note(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    log = tmp_path / "sidecar.log"
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        with sidecar_process(*_argv(dep, nats_server, "--idle-stop", "0.5"), log=log) as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
            # Re-executed without its secrets, it keeps its idle time.
            cmdline = psutil.Process(proc.pid).cmdline()
            assert cmdline[cmdline.index("--idle-stop") + 1] == "0.5"
            assert (await hub.deliver(mail(dep, 1, "one"))).result == "stored"
            assert await exited(proc, timeout=10) == SidecarExit.ASLEEP
            pid = proc.pid
        assert len(desk.asks) == 1
    assert (dep.state_dir / FINAL_EXIT_NOTE).read_text() == str(pid)
    assert dep.query("SELECT state FROM inbox") == [("done",)]


@pytest.mark.slow  # a real `python -m sidecar`
@pytest.mark.anyio
async def test_sigusr1_makes_an_idle_one_ask_at_once_and_a_busy_one_not(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    log = tmp_path / "sidecar.log"

    def nudges() -> int:
        return log.read_text().count("SIGUSR1: sleeping now if idle")

    # Its events refused until the test says: busy, and for a while.
    async with hub_and_desk(nats_server, dep, refuse_events=["store_unavailable"] * 1000) as (
        hub,
        desk,
    ):
        # An hour of idle time: only SIGUSR1 makes it ask.
        with sidecar_process(*_argv(dep, nats_server, "--idle-stop", "3600"), log=log) as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
            assert (await hub.deliver(mail(dep, 1, "one"))).result == "stored"
            await wait_for(lambda: hub.batches >= 2, what="events refused")
            proc.send_signal(signal.SIGUSR1)
            await wait_for(lambda: nudges() == 1, what="the first nudge")
            refused = hub.batches
            await wait_for(lambda: hub.batches >= refused + 2, what="more events refused")
            assert desk.asks == [] and proc.poll() is None
            hub.refuse_events.clear()
            await hub.wait_events(DispatchProcessed, 1)
            await wait_for(lambda: dep.query("SELECT count(*) FROM outbox") == [(0,)])
            proc.send_signal(signal.SIGUSR1)
            assert await exited(proc, timeout=10) == SidecarExit.ASLEEP
        assert len(desk.asks) == 1 and nudges() == 2


@pytest.mark.slow  # a real `python -m sidecar`
@pytest.mark.anyio
async def test_without_an_idle_time_sigusr1_is_ignored(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    log = tmp_path / "sidecar.log"
    async with hub_and_desk(nats_server, dep) as (hub, desk):
        with sidecar_process(*_argv(dep, nats_server), log=log) as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
            assert (await hub.deliver(mail(dep, 1, "one"))).result == "stored"
            await hub.wait_events(DispatchProcessed, 1)
            proc.send_signal(signal.SIGUSR1)
            assert (await hub.deliver(mail(dep, 2, "two"))).result == "stored"
            await hub.wait_events(DispatchProcessed, 2)
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0  # not killed by the SIGUSR1
        assert desk.asks == []
    assert not (dep.state_dir / FINAL_EXIT_NOTE).exists()
