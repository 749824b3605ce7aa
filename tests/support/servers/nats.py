"""A nats-server child process for tests, and the one the ``nats_server`` fixture runs.

Tests (and bench/) kill -9 it and start it again on the same port.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

import anyio

from hub._errors import NatsServerError, NatsServerStartTimeout
from hub.up import find_nats_server
from hub.up.nats import greeting_names, greets
from hub.up.processes import pdeathsig_preexec
from runtime.config import LOOPBACK

from ..launch.ports import free_port
from ..launch.starts import NATS_START_TIMEOUT

_POLL = 0.005
_PROBE_TIMEOUT = 1.0
_RELOADED = "Reloaded server configuration"
_RELOAD_FAILED = "Failed to reload server configuration"


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)


class NatsServerProcess:
    """One nats-server child process on a fixed loopback port.

    ``start``/``stop`` are async; ``start_sync``/``stop_sync`` do the same for
    synchronous callers such as pytest fixtures. ``kill`` is SIGKILL. The port
    is chosen once, so the server can be killed and started again on it.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = LOOPBACK,
        binary: Path | None = None,
        store_dir: Path | None = None,
        monitor_port: int | None = None,
        log_file: Path | None = None,
        pdeathsig: bool = False,
        start_timeout: float = NATS_START_TIMEOUT,
        server_name: str | None = None,
        config_file: Path | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.binary = binary if binary is not None else find_nats_server()
        self.store_dir = store_dir
        self.monitor_port = monitor_port
        self.log_file = log_file
        self.pdeathsig = pdeathsig
        self.start_timeout = start_timeout
        self.server_name = server_name or f"mailrun-{secrets.token_hex(6)}"
        self.config_file = config_file
        """A configuration (an ``authorization`` block, say) the server
        includes; :meth:`reload` makes it read the file again."""
        self.extra_args = list(extra_args or [])
        """Added to the command line (a cluster's ``--cluster`` and ``--routes``)."""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def argv(self) -> list[str]:
        if self.config_file is not None:
            argv = [str(self.binary), "-c", str(self._wrapper())]
        else:
            argv = [str(self.binary), "-a", self.host, "-p", str(self.port), "-n", self.server_name]
        if self.store_dir is not None:
            argv += ["--jetstream", "--store_dir", str(self.store_dir)]
        if self.monitor_port is not None:
            argv += ["-m", str(self.monitor_port)]
        return argv + self.extra_args

    def _wrapper(self) -> Path:
        # Address and name in a file, not on the command line: a reload
        # re-reads the file and refuses a server name only flags gave.
        assert self.config_file is not None
        wrapper = self.config_file.with_name(f".{self.server_name}.conf")
        wrapper.write_text(
            f'listen: "{self.host}:{self.port}"\nserver_name: "{self.server_name}"\n'
            f'include "{self.config_file.name}"\n'
        )
        return wrapper

    def reload(self) -> None:
        """Have the running server read its configuration again (SIGHUP)."""
        if self._proc is None or self._proc.poll() is not None:
            raise NatsServerError("nats-server is not running")
        self._proc.send_signal(signal.SIGHUP)

    async def reload_applied(self, timeout: float = 10.0) -> None:
        """:meth:`reload`, and return once the server has applied it.

        SIGHUP only asks: the server applies the new configuration on its own
        goroutine, and while it does it checks every connected client against
        the new users again. A client that connects in that window can be
        closed with an authorization violation right after it was admitted,
        so a test that admits an identity waits for the reload to be over
        (the server's log says so) before that identity connects."""
        if self.log_file is None:
            raise NatsServerError("reload_applied needs the server's log_file")
        before = self._log_count(_RELOADED), self._log_count(_RELOAD_FAILED)
        self.reload()
        with anyio.fail_after(timeout):
            while True:
                if self._log_count(_RELOAD_FAILED) > before[1]:
                    raise NatsServerError(
                        f"nats-server refused the new configuration: see {self.log_file}"
                    )
                if self._log_count(_RELOADED) > before[0]:
                    return
                await anyio.sleep(_POLL)

    def _log_count(self, line: str) -> int:
        assert self.log_file is not None
        if not self.log_file.exists():
            return 0
        return self.log_file.read_text(errors="replace").count(line)

    @contextlib.contextmanager
    def _output(self) -> Iterator[IO[bytes] | int]:
        if self.log_file is None:
            yield subprocess.DEVNULL
        else:
            # Appending keeps the log of every run across kill/restart cycles.
            with open(self.log_file, "ab") as log:
                yield log

    def _spawn(self) -> subprocess.Popen[bytes]:
        # Deliberately a blocking call on the caller's thread: fork+exec takes
        # milliseconds, and PR_SET_PDEATHSIG binds the child to this thread.
        if self.running:
            raise NatsServerError(f"nats-server already running (pid {self.pid})")
        preexec = pdeathsig_preexec() if self.pdeathsig else None
        with self._output() as out:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, preexec_fn=preexec
            )
        return self._proc

    async def _greets(self) -> bool:
        return await greets(self.host, self.port, self.server_name, _PROBE_TIMEOUT)

    def _greets_sync(self) -> bool:
        try:
            with (
                socket.create_connection((self.host, self.port), _PROBE_TIMEOUT) as sock,
                sock.makefile("rb") as reader,
            ):
                line = reader.readline(65536)
        except OSError:
            return False
        return greeting_names(line, self.server_name)

    def _not_listening(self, proc: subprocess.Popen[bytes]) -> NatsServerError:
        if proc.poll() is None:
            return NatsServerStartTimeout(f"nats-server not listening on {self.url} in time")
        hint = f"see {self.log_file}" if self.log_file else "port in use?"
        return NatsServerError(
            f"nats-server exited with {proc.returncode} before listening on {self.url} ({hint})"
        )

    async def start(self) -> None:
        """Start the server and wait until it greets a client on its port."""
        proc = self._spawn()
        try:
            with anyio.move_on_after(self.start_timeout):
                while proc.poll() is None:
                    if await self._greets():
                        return
                    await anyio.sleep(_POLL)
            raise self._not_listening(proc)
        except BaseException:
            self.kill()  # never leave a half-started server behind, even when cancelled
            raise

    def start_sync(self) -> None:
        """Blocking variant of :meth:`start`."""
        proc = self._spawn()
        try:
            deadline = time.monotonic() + self.start_timeout
            while proc.poll() is None and time.monotonic() < deadline:
                if self._greets_sync():
                    return
                time.sleep(_POLL)
            raise self._not_listening(proc)
        except BaseException:
            self.kill()
            raise

    async def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Idempotent."""
        proc = self._proc
        try:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                await anyio.to_thread.run_sync(_wait, proc, timeout, abandon_on_cancel=True)
        finally:
            self.kill()

    def stop_sync(self, timeout: float = 5.0) -> None:
        """Blocking variant of :meth:`stop`."""
        proc = self._proc
        try:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                _wait(proc, timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the server (as a crash would) and reap it. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()  # returns at once after SIGKILL; reaping avoids a zombie

    async def __aenter__(self) -> NatsServerProcess:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self.stop()

    def __enter__(self) -> NatsServerProcess:
        self.start_sync()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_sync()


@contextlib.contextmanager
def running_nats_server(log_dir: Path) -> Iterator[NatsServerProcess]:
    """A nats-server on a free loopback port, its log in ``log_dir``; stopped on exit."""
    server = NatsServerProcess(log_file=log_dir / "nats-server.log")
    server.start_sync()
    try:
        yield server
    finally:
        server.stop_sync()
