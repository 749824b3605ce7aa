"""Scale to zero, the sidecar against the hub's own ``hub.sleep`` handler,
and as a real process (``python -m sidecar --idle-stop``): its exit code
and note, SIGUSR1 when idle and when busy, SIGUSR1 without an idle time."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import anyio
import psutil
import pytest

from hub.store import deployments_to_wake
from hub.wire import DispatchConfig, WireConfig
from runtime import (
    FINAL_EXIT_NOTE,
    DispatchProcessed,
    SidecarExit,
    open_nats,
)
from runtime.config import LOOP_ENV
from tests.sidecar.sleep.sleeping import HeldSleeps, hub_and_desk, serving
from tests.sidecar.test_process import exited, sidecar_process
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.sidecar import (
    Deployment,
    mail,
    make_deployment,
)
from tests.support.harnesses.wire import accept, joined, running_hub

# --- against the hub's own hub.sleep handler ------------------------------------


@pytest.mark.anyio
async def test_the_hub_puts_it_to_sleep_and_keeps_its_mail_for_the_next_process(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with (
        open_nats(nats_server.url, name="hub") as bus,
        running_hub(tmp_path, transport=bus) as hub,
    ):
        source = "async def main(ctx, item):\n    ctx.state['n'] = ctx.state.get('n', 0) + 1\n"
        dep, wired = await joined(hub, nats_server.url, tmp_path / "sidecar", source)

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


@pytest.mark.anyio
async def test_mail_accepted_while_it_asks_is_delivered_without_a_timeout_then_it_sleeps(
    tmp_path: Path, nats_server: NatsServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A mail accepted while the sidecar asks to sleep: its frame reaches
    the closed door, the hub refuses the Sleep ``busy``, and the frame is
    answered then, not after the lane's request timed out (30 s here, so a
    frame dropped at the door cannot be sent again within the test); it is
    processed once, and the next Sleep is granted."""
    caplog.set_level(logging.INFO, logger="mailrun.sidecar.delivery")
    config = WireConfig(dispatch=DispatchConfig(request_timeout=30.0))
    gate = HeldSleeps()
    async with (
        open_nats(nats_server.url, name="hub") as bus,
        running_hub(tmp_path, transport=bus, config=config) as hub,
    ):
        source = "async def main(ctx, item):\n    ctx.state['n'] = ctx.state.get('n', 0) + 1\n"
        dep, wired = await joined(hub, nats_server.url, tmp_path / "sidecar", source)

        async with serving(nats_server, dep, connect=gate) as (car, ended):
            with anyio.fail_after(10):
                await gate.held.wait()  # the door is closed, the Sleep not sent yet
            await accept(hub, wired, [b"late"])
            await wait_for(
                lambda: any("asking to sleep" in r.getMessage() for r in caplog.records),
                what="the frame at the closed door",
            )
            gate.release.set()  # the hub answers busy: a dispatch waits
            with anyio.fail_after(10):  # well within the lane's 30 s timeout
                await ended.wait()  # stored, processed, idle again, asked again, granted
            assert car.asleep and car.sleeper is not None and car.sleeper.asks == 2
        assert await hub.one("SELECT 1 FROM deployment_sleep WHERE deployment_id = ?", dep.id)
        assert hub.wire.sessions.current(dep.id) is None
        rows = await hub.all(
            "SELECT status, attempts FROM workflow_run_dispatch WHERE deployment_id = ?", dep.id
        )
        assert [tuple(row) for row in rows] == [("processed", 0)]
    assert dep.query("SELECT state FROM inbox") == [("done",)]


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
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_sigusr1_makes_an_idle_one_ask_at_once_and_a_busy_one_not_while_busy(
    tmp_path: Path, nats_server: NatsServerProcess, loop: str
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
        argv = _argv(dep, nats_server, "--idle-stop", "3600")
        with sidecar_process(*argv, log=log, env={LOOP_ENV: loop}) as proc:
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
            # Idle now: this one asks, unless the first (which holds a
            # second, tests/sidecar/sleep/test_sleep.py) has had it ask already.
            proc.send_signal(signal.SIGUSR1)
            assert await exited(proc, timeout=10) == SidecarExit.ASLEEP
        assert len(desk.asks) == 1 and nudges() in (1, 2)


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
