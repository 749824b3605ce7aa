"""Child processes for ``mailrun up``: spawn, watch, restart with backoff, stop.

Every child is started with ``PR_SET_PDEATHSIG=SIGKILL`` so the kernel kills
it when the supervisor dies, even by SIGKILL, and no orphan keeps a port or a
deployment's ownership. The death signal fires when the *thread* that forked
the child exits, so children are spawned from the event loop's thread, never
from a worker thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import anyio

import runtime

from .handles import Handle, PopenHandle, stop_handle, wait_exit

SPAWN_FAILED = 127
_PR_SET_PDEATHSIG = 1
_TAIL = 4096  # bytes of a log read for its last line
_WORDS = 300  # characters of that line repeated in up's own output

ExitHook = Callable[[str, int, float], None]
"""``on_exit(name, returncode, restart_delay)``: a child died (or could not be
started: ``SPAWN_FAILED``, see ``Child.last_error``) and will be restarted."""


def pdeathsig_preexec() -> Callable[[], None]:
    """A ``preexec_fn`` making the child receive SIGKILL when its parent dies.

    Linux only. The kernel tracks the *thread* that forked the child, so spawn
    from a long-lived thread (the event loop's), never from a worker thread.
    """
    if not sys.platform.startswith("linux"):
        raise OSError("pdeathsig needs Linux (prctl PR_SET_PDEATHSIG)")
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork, not in the child
    parent = os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


@dataclass(frozen=True)
class Backoff(runtime.Backoff):
    """Restart delays: ``initial`` doubling up to ``maximum``; a child that stayed
    up ``reset_after`` seconds counts as healthy and starts over at ``initial``.

    No jitter: one child has no peers to retry in lockstep with, and the delay
    ``up`` announces is the one it waits."""

    initial: float = 0.1
    maximum: float = 5.0
    jitter: bool = False
    reset_after: float = 10.0


MISSED_START = runtime.Backoff(initial=1.0, maximum=30.0, jitter=True)
"""The delay before a child that missed its start's bound (``Child.restart``)
is started again: doubling per miss in a row, jittered (sidecars that missed
together, behind one cause, do not come back in step), and never reset by
the time the missed one was up."""


class Slot(Protocol):
    """A place to run in, of which there are few (``mailrun up --max-awake``):
    a child that crashed gives it up while it waits out its restart's
    backoff, and takes one again before it starts again."""

    def free(self) -> None:
        """The child's process has exited and the child will restart."""

    async def take(self) -> None:
        """Return once the child may start its process again."""


@dataclass(frozen=True)
class ChildSpec:
    name: str
    argv: Sequence[str]
    log_path: Path | None = None
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    final_codes: frozenset[int] = frozenset()
    """Exit codes that mean "do not start me again" (a sidecar whose deployment
    moved to another owner or was deleted): ``run`` then ends by itself."""
    final_note: Path | None = None
    """With it, a final code counts only when the process wrote its pid to
    this file first (``runtime.SidecarExit``: the code alone may come from
    the workflow the process runs); anything else is a crash."""
    pass_fds: tuple[int, ...] = ()
    """Descriptors it inherits (the hub's listening sockets), when ``up`` spawns it."""

    def last_words(self) -> str | None:
        """The last line its log holds (cut at ``_WORDS`` characters), or None:
        what a process that exited said last, its error as a rule."""
        if self.log_path is None:
            return None
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - _TAIL))
                tail = log.read().decode(errors="replace")
        except OSError:
            return None
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        if not lines:
            return None
        last = lines[-1]
        return last if len(last) <= _WORDS else last[: _WORDS - 1] + "…"

    def meant(self, code: int, pid: int) -> bool:
        """Whether ``code``, the exit of process ``pid``, says "do not start me again"."""
        if code not in self.final_codes:
            return False
        if self.final_note is None:
            return True
        try:
            noted = self.final_note.read_text().strip()
        except OSError:
            return False
        return noted == str(pid)


Start = Callable[[ChildSpec], Awaitable[Handle]]
"""How a child's process is started: :func:`exec_start` (``up`` spawns it),
or the fork server's (hub/up/fleet/forking.py). Raises ``OSError`` or
``subprocess.SubprocessError`` when it cannot be."""


def spawn(spec: ChildSpec, *, pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """Start ``spec`` now, output appended to its log (or inherited), stdin closed;
    its ``pass_fds`` and ``pass_fds`` stay open in it."""
    log = None
    if spec.log_path is not None:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = spec.log_path.open("ab")
    try:
        return subprocess.Popen(
            list(spec.argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT if log is not None else None,
            env=dict(spec.env) if spec.env is not None else None,
            cwd=spec.cwd,
            pass_fds=(*spec.pass_fds, *pass_fds),
            preexec_fn=pdeathsig_preexec(),
            # Its own process group: a terminal's Ctrl-C (or `timeout`) signals
            # only the supervisor, which then stops its children in order.
            process_group=0,
        )
    finally:
        if log is not None:
            log.close()


async def exec_start(spec: ChildSpec) -> Handle:
    """The process ``up`` spawns itself (``python -m ...``, a full start)."""
    return PopenHandle(spawn(spec))


async def terminate(proc: subprocess.Popen[bytes], grace: float) -> int:
    """SIGTERM, then SIGKILL if it is still there after ``grace`` seconds."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(grace):
            return await wait_exit(proc)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    return await wait_exit(proc)


class Child:
    """One supervised child: ``run`` keeps it alive until ``stop``.

    ``run`` is shielded from its caller's cancellation, so a supervisor can stop
    its children in an order of its choosing (sidecars before the hub before
    NATS); ``stop`` is the only way to end it.
    """

    def __init__(
        self,
        spec: ChildSpec,
        *,
        backoff: Backoff | None = None,
        stop_grace: float = 5.0,
        on_exit: ExitHook | None = None,
        start: Start = exec_start,
    ) -> None:
        self.spec = spec
        self.start = start
        self.backoff = backoff or Backoff()
        self.stop_grace = stop_grace
        self.on_exit = on_exit
        self.handle: Handle | None = None
        self.starts = 0
        self.last_error: str | None = None
        self.final_code: int | None = None
        """The exit code that ended ``run`` (one of ``spec.final_codes``)."""
        self.spawned_at: float | None = None
        """When its running process was started (``anyio.current_time()``)."""
        self._joined: Handle | None = None  # the process seen started in full
        self._missed = runtime.Retry(MISSED_START)
        self._restarting: str | None = None  # why ``restart`` ends the running process
        self._scope = anyio.CancelScope(shield=True)
        self._catching: dict[int, Handle] = {}  # signal -> the process seen catching it
        self._running = False
        self._done: anyio.Event | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        """The pid of the running process, None between death and restart."""
        handle = self.handle
        return handle.pid if handle is not None and handle.returncode is None else None

    @property
    def joining(self) -> bool:
        """Its process runs and has not been seen started in full (``joined``)."""
        handle = self.handle
        return handle is not None and handle.returncode is None and handle is not self._joined

    @property
    def restarting(self) -> bool:
        """``restart`` is ending its running process."""
        return self._restarting is not None

    @property
    def misses(self) -> int:
        """Starts in a row ended by ``restart``, none since seen ``joined``."""
        return self._missed.failures

    def joined(self) -> None:
        """Its running process has started in full (a sidecar: welcomed)."""
        self._joined = self.handle
        self._missed.succeeded()

    async def restart(self, why: str) -> None:
        """End the running process (as ``stop`` does: SIGTERM, SIGKILL after
        the grace) and start it again after ``MISSED_START``'s delay; ``why``
        is said as its exit's cause."""
        handle = self.handle
        if handle is None or handle.returncode is not None or self._scope.cancel_called:
            return
        self._restarting = why
        await stop_handle(handle, self.stop_grace)

    def send_signal(self, sig: int) -> bool:
        """Send ``sig`` to the running process; False between death and restart
        (the process started next reads its configuration afresh)."""
        handle = self.handle
        if handle is None or handle.returncode is not None:
            return False
        handle.send_signal(sig)
        return True

    def catches(self, sig: int) -> bool:
        """Whether the running process has a handler for ``sig`` (Linux: its
        ``SigCgt`` mask), so that the signal does not end it.

        Once seen, taken as kept for the rest of the process: a sidecar never
        puts SIGUSR1's default action back (it ignores it again once its
        receiver is gone), and asked while starts wait, every awake one was
        read from ``/proc`` four times a second (a quarter of ``up``'s CPU
        in a storm of wakes)."""
        handle = self.handle
        pid = self.pid
        if handle is None or pid is None:
            return False
        if self._catching.get(sig) is handle:
            return True
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        for line in status.splitlines():
            if line.startswith("SigCgt:"):
                caught = bool(int(line.split()[1], 16) >> (sig - 1) & 1)
                if caught:
                    self._catching[sig] = handle
                return caught
        return False

    async def run(self, slot: Slot | None = None) -> None:
        """Keep the child alive until ``stop`` (or until it exits with one of
        its final codes). With ``slot``, it is held only while a process of
        the child exists: freed on every exit before a restart, taken again
        once the backoff is over."""
        self._done = done = anyio.Event()
        self._running = True
        try:
            with self._scope:
                await self._keep_alive(slot)
        finally:
            self._running = False
            done.set()

    async def _keep_alive(self, slot: Slot | None) -> None:
        retry = runtime.Retry(self.backoff)
        while not self._scope.cancel_called:
            started = anyio.current_time()
            try:
                self.handle = handle = await self.start(self.spec)
            except (OSError, subprocess.SubprocessError) as exc:
                # Out of pids or fds is as transient as a crash: back off, retry.
                self.last_error = f"cannot start {self.spec.argv[0]}: {exc}"
                code = SPAWN_FAILED
            else:
                self.starts += 1
                self.last_error = None
                self.spawned_at = started
                try:
                    code = await handle.wait()
                finally:
                    if handle.returncode is None:
                        with anyio.CancelScope(shield=True):
                            await stop_handle(handle, self.stop_grace)
                    self.spawned_at = None
                if self.spec.meant(code, handle.pid):
                    self.final_code = code
                    return
            why, self._restarting = self._restarting, None
            if why is not None:
                self.last_error = why
                waited = self._missed  # not reset by the time it was up: it never started
            else:
                waited = retry
                if anyio.current_time() - started >= self.backoff.reset_after:
                    retry.succeeded()  # it stayed up: healthy, whatever ended it
            delay = waited.failed()
            if self.on_exit is not None:
                self.on_exit(self.name, code, delay)
            if slot is not None:
                slot.free()
            await waited.wait()
            if slot is not None:
                await slot.take()

    async def stop(self) -> None:
        """Stop the child (SIGTERM, SIGKILL after the grace) and end ``run``."""
        self._scope.cancel()
        if self._running and self._done is not None:
            await self._done.wait()

    async def wait_started(self, starts: int = 1) -> int:
        """Wait until the child has been started ``starts`` times and is up; its pid."""
        while True:
            pid = self.pid
            if self.starts >= starts and pid is not None:
                return pid
            await anyio.sleep(0.01)
