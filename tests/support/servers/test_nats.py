"""NatsServerProcess (tests/support/servers/nats.py), the tests' nats-server, against the real
binary."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from hub._errors import NatsServerError
from tests.support import REPO, NatsServerProcess, free_port, wait_for


def greeting(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        return sock.recv(4096)


def refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_start_sync_serves_nats_and_stop_sync_ends_it(tmp_path: Path) -> None:
    server = NatsServerProcess(log_file=tmp_path / "nats.log")
    server.start_sync()
    pid = server.pid
    assert pid is not None and server.running
    assert server.url == f"nats://127.0.0.1:{server.port}"
    assert greeting(server.port).startswith(b"INFO {")
    server.stop_sync()
    assert server.pid is None and not server.running
    assert gone(pid)
    assert refuses(server.port)
    assert (tmp_path / "nats.log").stat().st_size > 0


@pytest.mark.anyio
async def test_async_start_stop_and_context_manager() -> None:
    async with NatsServerProcess() as server:
        pid = server.pid
        assert pid is not None
        stream = await anyio.connect_tcp("127.0.0.1", server.port)
        async with stream:
            assert (await stream.receive()).startswith(b"INFO {")
    assert gone(pid)
    assert refuses(server.port)


def test_kill_then_restart_on_the_same_port(nats_server: NatsServerProcess) -> None:
    first = nats_server.pid
    assert first is not None
    nats_server.kill()
    assert gone(first)
    assert refuses(nats_server.port)
    nats_server.start_sync()
    assert nats_server.pid not in (None, first)
    assert greeting(nats_server.port).startswith(b"INFO {")


@pytest.mark.slow  # real nats-server processes
def test_start_fails_fast_when_the_port_belongs_to_someone_else() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        server = NatsServerProcess(port=squatter.getsockname()[1], start_timeout=5)
        started = time.monotonic()
        with pytest.raises(NatsServerError, match="exited"):
            server.start_sync()
        assert time.monotonic() - started < 4
        assert not server.running and server.pid is None


def test_jetstream_and_monitor_options_are_passed(tmp_path: Path) -> None:
    monitor = free_port()
    with NatsServerProcess(store_dir=tmp_path / "js", monitor_port=monitor) as server:
        assert "--jetstream" in server.argv
        assert b'"jetstream":true' in greeting(server.port)
        assert not refuses(monitor)


PARENT = """
import sys, time
from tests.support import NatsServerProcess
server = NatsServerProcess(pdeathsig=True)
server.start_sync()
print(server.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.slow  # real processes killed
@pytest.mark.anyio
async def test_pdeathsig_server_dies_with_its_parent_even_on_sigkill() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    async with await anyio.open_process([sys.executable, "-c", PARENT], env=env) as parent:
        try:
            assert parent.stdout is not None
            with anyio.fail_after(10):
                line = await BufferedByteReceiveStream(parent.stdout).receive_until(b"\n", 100)
            server_pid = int(line)
            assert not gone(server_pid)
            parent.send_signal(signal.SIGKILL)
            await wait_for(lambda: gone(server_pid), timeout=5)
        finally:
            with contextlib.suppress(ProcessLookupError):  # already dead and reaped
                parent.kill()
