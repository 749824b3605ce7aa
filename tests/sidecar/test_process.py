"""``python -m sidecar`` as a real process on a real nats-server."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import msgspec
import psutil
import pytest

from runtime import NATS_URL_ENV, DispatchProcessed, new_id, open_nats, read_restore_record
from runtime.config import BACKOFF_MAX_ENV, LOOP_ENV, LOOPBACK
from runtime.sidecar_contract import DEFAULT_SIDECAR_MAX_FILES, DEFAULT_SIDECAR_MAX_MEMORY
from runtime.wire import FailurePolicy, OnFailure, RunSuspended, b64url
from tests.support import REPO, NatsServerProcess, free_port, wait_for
from tests.support.harnesses.sidecar import fake_hub_on, mail, make_deployment

# slow: every test runs `python -m sidecar` as a real process
pytestmark = pytest.mark.slow


@contextmanager
def sidecar_process(
    *args: str, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sidecar", *args],
            cwd=REPO,
            stdout=out,
            stderr=out,
            env=None if env is None else {**os.environ, **env},
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


async def exited(proc: subprocess.Popen[bytes], timeout: float = 8.0) -> int:
    await wait_for(lambda: proc.poll() is not None, timeout=timeout)
    assert proc.returncode is not None
    return proc.returncode


@pytest.mark.anyio
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_boots_names_itself_serves_and_stops_on_sigterm(
    tmp_path: Path, nats_server: NatsServerProcess, loop: str
) -> None:
    dep = make_deployment(tmp_path / "state")
    async with (
        open_nats(nats_server.url, name="fake hub") as transport,
        fake_hub_on(transport, dep) as hub,
    ):
        with sidecar_process(
            "--state-dir",
            str(dep.state_dir),
            "--nats",
            nats_server.url,
            log=tmp_path / "sidecar.log",
            env={LOOP_ENV: loop},
        ) as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
            # Started without --deployment, it names its deployment in argv.
            cmdline = psutil.Process(proc.pid).cmdline()
            assert "sidecar" in cmdline and dep.id in cmdline
            assert (await hub.deliver(mail(dep, 1, "real"))).result == "stored"
            await hub.wait_events(DispatchProcessed, 1)
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0
    log = (tmp_path / "sidecar.log").read_text()
    assert "SIGTERM: stopping" in log
    assert f", loop {loop})" in log  # on the event loop asked for
    assert dep.query("SELECT state FROM inbox") == [("done",)]


@pytest.mark.anyio
async def test_join_token_writes_the_record_then_boots(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    source = make_deployment(tmp_path / "hub-side")
    record, _ = read_restore_record(source.record_file)
    token = b64url(msgspec.json.encode(record))
    state = tmp_path / "other-host"
    dep = type(source)(source.id, source.address, source.seed, source.public_key, state)
    async with (
        open_nats(nats_server.url, name="fake hub") as transport,
        fake_hub_on(transport, dep) as hub,
    ):
        with sidecar_process(
            "--state-dir",
            str(state),
            "--nats",
            nats_server.url,
            "--join",
            token,
            log=tmp_path / "sidecar.log",
        ) as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
            assert token not in " ".join(psutil.Process(proc.pid).cmdline())
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0
    assert read_restore_record(dep.record_file)[0].hub_key.seed == dep.seed


@pytest.mark.anyio
async def test_owner_conflict_exits_non_zero_with_a_clear_error(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    async with (
        open_nats(nats_server.url, name="fake hub") as transport,
        fake_hub_on(transport, dep, refuse_hello="owner_conflict"),
    ):
        with sidecar_process(
            "--state-dir",
            str(dep.state_dir),
            "--deployment",
            dep.id,
            "--nats",
            nats_server.url,
            log=tmp_path / "sidecar.log",
        ) as proc:
            assert await exited(proc, timeout=10) == 3
    assert "--takeover" in (tmp_path / "sidecar.log").read_text()


@pytest.mark.anyio
async def test_no_restore_record_is_a_usage_error(tmp_path: Path) -> None:
    with sidecar_process("--state-dir", str(tmp_path), log=tmp_path / "sidecar.log") as proc:
        assert await exited(proc) == 2
    assert "no restore record" in (tmp_path / "sidecar.log").read_text()


@pytest.mark.anyio
async def test_started_by_hand_it_contains_itself_before_it_serves(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    # Not under `mailrun up`: the process re-executes itself without the NATS
    # URL in argv and with a stripped environment, in its state dir, limited.
    dep = make_deployment(tmp_path / "state")
    dep.record_file.chmod(0o644)  # as an earlier release may have left it
    async with (
        open_nats(nats_server.url, name="fake hub") as transport,
        fake_hub_on(transport, dep) as hub,
    ):
        with sidecar_process(
            "--state-dir",
            str(dep.state_dir),
            "--nats",
            nats_server.url,
            env={"OPERATOR_SECRET": "s3cret"},
            log=tmp_path / "sidecar.log",
        ) as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
            sidecar = psutil.Process(proc.pid)
            assert nats_server.url not in sidecar.cmdline()
            env = sidecar.environ()
            assert "OPERATOR_SECRET" not in env
            assert env[NATS_URL_ENV] == nats_server.url
            assert env["HOME"] == sidecar.cwd() == str(dep.state_dir)
            assert sidecar.rlimit(psutil.RLIMIT_AS) == (DEFAULT_SIDECAR_MAX_MEMORY,) * 2
            assert sidecar.rlimit(psutil.RLIMIT_NOFILE) == (DEFAULT_SIDECAR_MAX_FILES,) * 2
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0
    assert stat.S_IMODE(dep.record_file.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_a_join_token_naming_a_path_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    source = make_deployment(tmp_path / "hub-side")
    record, _ = read_restore_record(source.record_file)
    bad = msgspec.structs.replace(record, deployment_id="../../escaped")
    state = tmp_path / "host" / "state"
    token = b64url(msgspec.json.encode(bad))
    with sidecar_process(
        "--state-dir", str(state), "--join", token, log=tmp_path / "sidecar.log"
    ) as proc:
        assert await exited(proc) == 2
    assert "not a join token" in (tmp_path / "sidecar.log").read_text()
    assert "not a deployment id" in (tmp_path / "sidecar.log").read_text()
    assert not (tmp_path / "host").exists() and not (tmp_path / "escaped").exists()


async def _published(monitor: int, name: str) -> int:
    """Messages the named connection has published (nats-server's monitoring)."""
    async with httpx.AsyncClient() as client:
        connz = (await client.get(f"http://{LOOPBACK}:{monitor}/connz")).json()
    return sum(c["in_msgs"] for c in connz["connections"] if c.get("name") == name)


@pytest.mark.anyio
async def test_a_standalone_sidecar_outlives_a_long_hub_outage_and_carries_on(
    tmp_path: Path,
) -> None:
    # Time compressed by configuration: each retry waits at most 1 ms instead
    # of 1 s, so the thousands of attempts of a long outage take seconds.
    monitor = free_port()
    server = NatsServerProcess(monitor_port=monitor, log_file=tmp_path / "nats.log")
    dep = make_deployment(tmp_path / "state")
    name = f"sidecar {dep.id}"
    async with server, open_nats(server.url, name="courier") as courier:
        with sidecar_process(
            "--state-dir",
            str(dep.state_dir),
            "--nats",
            server.url,
            env={BACKOFF_MAX_ENV: "0.001"},
            log=tmp_path / "sidecar.log",
        ) as proc:
            async with (
                open_nats(server.url, name="fake hub") as transport,
                fake_hub_on(transport, dep) as hub,
            ):
                await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
                assert (await hub.deliver(mail(dep, 1, "before"))).result == "stored"
                await hub.wait_events(DispatchProcessed, 1)
            # The hub is gone, with its connection: nobody answers. A mail it
            # sent just before still comes in, its events find nobody, and a
            # HubBoot from a hub that died at once sends the sidecar to say
            # hello to nobody, again and again.
            hub.transport = courier
            assert (await hub.deliver(mail(dep, 2, "during"))).result == "stored"
            await hub.announce(new_id("boot"))
            before = await _published(monitor, name)

            async def many_attempts() -> bool:
                assert proc.poll() is None, "the sidecar exited"
                # Hellos and event batches: each loop past attempt 1025.
                return await _published(monitor, name) - before >= 2200

            await wait_for(many_attempts, timeout=90, what="thousands of attempts")
            async with (
                open_nats(server.url, name="fake hub again") as transport,
                fake_hub_on(transport, dep, welcomes=list(hub.welcomes)) as back,
            ):
                await back.announce(back.boot_id)
                await wait_for(lambda: len(back.welcomes) > len(hub.welcomes), timeout=5)
                await wait_for(lambda: len(back.of_kind(DispatchProcessed)) == 1, timeout=5)
                assert (await back.deliver(mail(dep, 3, "after"))).result == "stored"
                await wait_for(lambda: len(back.of_kind(DispatchProcessed)) == 2, timeout=5)
            assert proc.poll() is None
    assert dep.query("SELECT seq, outcome FROM inbox ORDER BY seq") == [
        (1, "processed"),
        (2, "processed"),
        (3, "processed"),
    ]


@pytest.mark.anyio
async def test_an_unknown_event_loop_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "state")
    log = tmp_path / "sidecar.log"
    with sidecar_process(
        "--state-dir", str(dep.state_dir), env={LOOP_ENV: "trio"}, log=log
    ) as proc:
        assert await exited(proc) == 2
    (line,) = log.read_text().splitlines()
    assert line.endswith(
        " ERROR mailrun.sidecar: MAILRUN_LOOP must be uvloop or asyncio, got 'trio'"
    )


@pytest.mark.anyio
async def test_a_bad_failpoint_spec_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "state")
    log = tmp_path / "sidecar.log"
    spec = "sidecar.handler.afterwards=crash"
    with sidecar_process(
        "--state-dir", str(dep.state_dir), env={"MAILRUN_FAILPOINTS": spec}, log=log
    ) as proc:
        assert await exited(proc) == 2
    (line,) = log.read_text().splitlines()
    assert line.endswith(
        " ERROR mailrun.sidecar: MAILRUN_FAILPOINTS: unknown failpoint"
        " 'sidecar.handler.afterwards' (docs/faults.md)"
    )


@pytest.mark.anyio
async def test_a_sidecar_with_failpoints_armed_says_so_at_start(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state")
    log = tmp_path / "sidecar.log"
    async with (
        open_nats(nats_server.url, name="fake hub") as transport,
        fake_hub_on(transport, dep) as hub,
    ):
        with sidecar_process(
            "--state-dir",
            str(dep.state_dir),
            "--nats",
            nats_server.url,
            env={"MAILRUN_FAILPOINTS": "sidecar.handler.after=1*raise"},
            log=log,
        ) as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0
    # Once, although the process re-executed itself (containment) on the way.
    (line,) = [line for line in log.read_text().splitlines() if "failpoints armed" in line]
    assert line.endswith(
        " WARNING mailrun.failpoints: failpoints armed (MAILRUN_FAILPOINTS):"
        " sidecar.handler.after=1*raise"
    )


CRASHER = """
import os


async def main(ctx, item):
    if item.subject == "crash":
        os._exit(17)
    ctx.state.setdefault("seen", []).append(item.subject)
"""


@pytest.mark.anyio
async def test_a_handler_that_kills_its_process_ends_in_the_policy_not_a_crash_loop(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    # Each death is one attempt of the item being handled: after
    # max_attempts deaths, the next process suspends its run without
    # calling the handler, and the deployment's other runs go on.
    policy = FailurePolicy(on_failure=OnFailure.SUSPEND, max_attempts=3, max_backoff=0.05)
    dep = make_deployment(tmp_path / "state", source=CRASHER)
    args = ("--state-dir", str(dep.state_dir), "--nats", nats_server.url)
    crash = mail(dep, 1, "crash")
    deaths = 0
    async with (
        open_nats(nats_server.url, name="fake hub") as transport,
        fake_hub_on(transport, dep, policy=policy) as hub,
    ):
        for start in range(policy.max_attempts + 1):
            with sidecar_process(*args, log=tmp_path / f"sidecar{start}.log") as proc:
                if start == 0:
                    await wait_for(lambda: len(hub.welcomes) == 1, what="the first welcome")
                    assert (await hub.deliver(crash)).result == "stored"
                # A later process takes the stored item up again before or after
                # its hello: it may die before any welcome, so none is waited for.
                if start < policy.max_attempts:
                    assert await exited(proc, timeout=20) == 17
                    deaths += 1
                    continue
                await hub.wait_events(RunSuspended, 1)
                assert (await hub.deliver(mail(dep, 2, "other", run_id=new_id("run")))).result
                await hub.wait_events(DispatchProcessed, 1)
                proc.send_signal(signal.SIGTERM)
                assert await exited(proc) == 0
    assert deaths == policy.max_attempts
    (suspended,) = hub.of_kind(RunSuspended)
    assert (suspended.dispatch_id, suspended.attempts) == (crash.dispatch_id, 3)
    assert "died" in suspended.error
    assert dep.query("SELECT seq, state, attempts FROM inbox ORDER BY seq") == [
        (1, "held", 3),
        (2, "done", 0),
    ]
