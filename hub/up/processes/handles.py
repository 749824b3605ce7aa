"""A supervised process as ``up`` sees it (:class:`Handle`), whichever way it
was started: spawned by ``up`` itself (:class:`PopenHandle`), or forked by
the fork server (:class:`ForkedHandle`), whose parent is not ``up`` and
whose end the fork server relays.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Protocol

import anyio


class Handle(Protocol):
    """One process of a child: its pid, its end, the signals it gets."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None:
        """None while it runs; then its exit code, or a signal's number negated."""

    def send_signal(self, sig: int) -> None:
        """Raises ``ProcessLookupError`` once it has ended."""

    async def wait(self) -> int:
        """Its ``returncode``, once it has ended."""


async def wait_exit(proc: subprocess.Popen[bytes]) -> int:
    """Wait for ``proc`` to exit without a thread: a pidfd becomes readable then."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # pragma: no cover - kernels before 5.3
        while True:
            if (code := proc.poll()) is not None:
                return code
            await anyio.sleep(0.05)
    try:
        while (code := proc.poll()) is None:
            await anyio.wait_readable(pidfd)
        return code
    finally:
        os.close(pidfd)


class PopenHandle:
    """A process ``up`` spawned (``exec``): its own child, waited for by pidfd."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is not None:
            raise ProcessLookupError(self.proc.pid)
        self.proc.send_signal(sig)

    async def wait(self) -> int:
        return await wait_exit(self.proc)


class ForkedHandle:
    """A process the fork server forked: ``end`` is called with the status the
    fork server relays, or as crashed (SIGKILL) when the fork server is gone,
    which its sidecars do not outlive (``PR_SET_PDEATHSIG``)."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._code: int | None = None
        self._ended = anyio.Event()
        # Signals go through a pidfd: once the fork server has reaped the
        # process they fail, where a pid could name a new process by then.
        self._pidfd: int | None = None
        with contextlib.suppress(OSError):
            self._pidfd = os.pidfd_open(pid)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._code

    def send_signal(self, sig: int) -> None:
        if self._code is not None or self._pidfd is None:
            raise ProcessLookupError(self._pid)
        signal.pidfd_send_signal(self._pidfd, sig)

    async def wait(self) -> int:
        await self._ended.wait()
        assert self._code is not None
        return self._code

    def end(self, code: int) -> None:
        if self._code is None:
            self._code = code
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self._ended.set()


async def stop_handle(handle: Handle, grace: float) -> int:
    """SIGTERM, then SIGKILL if it is still there after ``grace`` seconds."""
    if handle.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            handle.send_signal(signal.SIGTERM)
        with anyio.move_on_after(grace):
            return await handle.wait()
        with contextlib.suppress(ProcessLookupError):
            handle.send_signal(signal.SIGKILL)
    return await handle.wait()
