"""``python -m sidecar`` as a real process on a real nats-server."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import psutil
import pytest

from runtime import DispatchProcessed, b64url, open_nats, read_restore_record
from tests.support import REPO, NatsServerProcess, wait_for
from tests.support.sidecar import fake_hub_on, mail, make_deployment


@contextmanager
def sidecar_process(*args: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sidecar", *args], cwd=REPO, stdout=out, stderr=out
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
async def test_boots_names_itself_serves_and_stops_on_sigterm(
    tmp_path: Path, nats_server: NatsServerProcess
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
