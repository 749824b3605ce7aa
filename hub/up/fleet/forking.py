"""``up``'s side of the fork server (``python -m sidecar.forking``): the
process it starts once and supervises like its other children, and the
start (``children.Start``) of every sidecar forked from it.

The fork server is a child like the hub: restarted with backoff when it
dies, stopped after the sidecars. It is started with a sidecar's stripped
environment and one end of a fresh ``SOCK_SEQPACKET`` pair each time; while
it runs, each sidecar start sends it a ``Fork`` (with the sidecar's log file
as ``SCM_RIGHTS``) and gets a :class:`ForkedHandle`, whose end the fork
server relays. When the fork server dies its sidecars die with it
(``PR_SET_PDEATHSIG``): their handles end as killed, and their children
restart them with their own backoff, forked again once it is back. While
it is not running, or does not answer, a sidecar is spawned as without it.

A fork server that is alive but answers nothing (stopped, stuck) would cost
every start its ``ANSWER_TIMEOUT`` for as long as it lives: after
``MISSED_ANSWERS`` such misses in a row ``up`` kills it, and its child
starts it again with backoff, as after any death.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from typing import Final

import anyio

from runtime import python_m
from runtime.sidecar_contract import (
    FORK_MAX_FRAME,
    FORK_TITLE_ROOM,
    Exited,
    Fork,
    Forked,
    ForkRefused,
    decode_answer,
    encode_frame,
)

from ..processes import ChildSpec, ForkedHandle, Handle, PopenHandle, exec_start, spawn, wait_exit

log = logging.getLogger("mailrun.up")

ANSWER_TIMEOUT: Final = 5.0
"""Seconds a fork waits for the fork server's answer before the sidecar is
spawned instead (a fork server that is still importing answers within
about a quarter of a second)."""

MISSED_ANSWERS: Final = 3
"""Forks in a row that got no answer within ``ANSWER_TIMEOUT``, the fork
server having said nothing at all meanwhile (no answer, no late answer, no
sidecar's end), after which ``up`` kills it. A slow one under load still
answers some fork within the timeout, or late: that it spoke ends the row.
Killed, its sidecars die with it and restart with their own backoff: a
fork server that answers nothing no longer relays their ends either."""

_SIDECAR: Final = python_m("sidecar")
"""How ``up`` runs a sidecar; the fork server forks one for what follows it
(the sidecar's own arguments)."""


class ForkUnavailable(OSError):
    """The fork server cannot fork this sidecar now: spawn it instead."""


class ForkServer:
    """The fork server child's start (``start_server``) and the sidecars'
    (``start``). ``say`` is told when a sidecar is spawned for want of it."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._link: _Link | None = None
        self._server: _ServerHandle | None = None
        self.forks = 0
        self.fallbacks = 0
        self.replaced = 0
        """Fork servers killed for missing ``MISSED_ANSWERS`` in a row."""

    async def start_server(self, spec: ChildSpec) -> Handle:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = [*spec.argv, "--control-fd", str(theirs.fileno())]
            # Blanks in its argv: the room its sidecars' titles take.
            argv += ["--room", " " * FORK_TITLE_ROOM]
            try:
                proc = spawn(dataclasses.replace(spec, argv=argv), pass_fds=(theirs.fileno(),))
            except BaseException:
                ours.close()
                raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._link = link = _Link(ours)
        self._server = server = _ServerHandle(proc, link)
        return server

    async def start(self, spec: ChildSpec) -> Handle:
        """A sidecar's start: forked when the fork server runs, else spawned."""
        link = self._link
        if link is not None and link.open and list(spec.argv[: len(_SIDECAR)]) == _SIDECAR:
            heard = link.heard
            try:
                with anyio.CancelScope(shield=True), anyio.fail_after(ANSWER_TIMEOUT):
                    handle = await link.fork(spec)
            except (ForkUnavailable, TimeoutError) as exc:
                self.fallbacks += 1
                self._say(f"mailrun up: {spec.name} spawned: the fork server {_why(exc)}")
                if isinstance(exc, TimeoutError) and link.heard == heard:
                    self._missed(link)
            else:
                self.forks += 1
                return handle
        return await exec_start(spec)

    def _missed(self, link: _Link) -> None:
        """A fork on ``link`` got no answer, and the fork server said nothing."""
        link.silent += 1
        server = self._server
        if link.silent != MISSED_ANSWERS or server is None or server.link is not link:
            return
        self.replaced += 1
        self._say(
            f"mailrun up: the fork server missed {MISSED_ANSWERS} answers in a row:"
            " killed, to be started again (its sidecars die with it and restart)"
        )
        # SIGKILL: a stopped process acts on nothing else, a stuck one may
        # not run its SIGTERM handler. Its child sees it die and restarts it.
        with contextlib.suppress(ProcessLookupError):
            server.send_signal(signal.SIGKILL)


def _why(exc: BaseException) -> str:
    return "did not answer" if isinstance(exc, TimeoutError) else str(exc)


class _Link:
    """The socket to one run of the fork server: requests out, answers and
    ends in, read by the fork server child's wait (:class:`_ServerHandle`)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.open = True
        self._asks = itertools.count()
        self._answers: dict[int, _Answer] = {}
        self._forked: dict[int, ForkedHandle] = {}
        self.heard = 0
        """Frames the fork server sent: it spoke since a fork was asked."""
        self.silent = 0
        """Forks in a row it left unanswered, saying nothing (``MISSED_ANSWERS``)."""

    async def fork(self, spec: ChildSpec) -> ForkedHandle:
        ask = next(self._asks)
        frame = encode_frame(
            Fork(
                ask,
                list(spec.argv[len(_SIDECAR) :]),
                dict(spec.env or {}),
                str(spec.cwd or os.getcwd()),
            )
        )
        answer = self._answers[ask] = _Answer()
        try:
            fds: list[int] = []
            if spec.log_path is not None:
                spec.log_path.parent.mkdir(parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                fds.append(os.open(spec.log_path, flags, 0o666))
            try:
                await self._send(frame, fds)
            finally:
                for fd in fds:
                    os.close(fd)
            await answer.event.wait()
        finally:
            del self._answers[ask]
        if answer.handle is None:
            raise ForkUnavailable(answer.error or "is gone")
        return answer.handle

    async def _send(self, frame: bytes, fds: list[int]) -> None:
        while True:
            if not self.open:
                raise ForkUnavailable("is gone")
            try:
                socket.send_fds(self.sock, [frame], fds)
                return
            except BlockingIOError:
                await anyio.wait_writable(self.sock)
            except OSError as exc:  # the fork server is gone
                raise ForkUnavailable(f"is gone ({exc})") from None

    async def read(self) -> None:
        """Take in answers and ends until the fork server closes its end."""
        while self.open:
            await anyio.wait_readable(self.sock)
            if not self._read_ready():
                return

    def _read_ready(self) -> bool:
        """Take what is there; False at the end of the stream."""
        while True:
            try:
                data = self.sock.recv(FORK_MAX_FRAME)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            try:
                frame = decode_answer(data)
            except ValueError as exc:
                log.error("the fork server said what it should not: %s", exc)
                continue
            self._take(frame)

    def _take(self, frame: Forked | ForkRefused | Exited) -> None:
        self.heard += 1
        self.silent = 0
        if isinstance(frame, Exited):
            handle = self._forked.pop(frame.pid, None)
            if handle is not None:
                handle.end(frame.returncode)
            return
        answer = self._answers.get(frame.ask)
        if isinstance(frame, ForkRefused):
            if answer is not None:
                answer.error = f"refused: {frame.error}"
                answer.event.set()
            return
        handle = ForkedHandle(frame.pid)
        self._forked[frame.pid] = handle
        if answer is None:
            # Its start gave up waiting and spawned the sidecar instead.
            handle.send_signal(signal.SIGKILL)
            return
        answer.handle = handle
        answer.event.set()

    def close(self) -> None:
        """The fork server has ended: what it relays no more ends here."""
        if not self.open:
            return
        self._read_ready()  # the ends it relayed before it went
        self.open = False
        self.sock.close()
        for handle in self._forked.values():
            # Killed with it by the kernel (its death signal).
            handle.end(-signal.SIGKILL)
        self._forked.clear()
        for answer in self._answers.values():
            answer.event.set()


class _Answer:
    __slots__ = ("error", "event", "handle")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.handle: ForkedHandle | None = None
        self.error: str | None = None


class _ServerHandle(PopenHandle):
    """The fork server's process: waiting for it reads its socket."""

    def __init__(self, proc: subprocess.Popen[bytes], link: _Link) -> None:
        super().__init__(proc)
        self.link = link

    async def wait(self) -> int:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.link.read)
                code = await wait_exit(self.proc)
                tg.cancel_scope.cancel()
        finally:
            if self.proc.poll() is not None:
                self.link.close()
        return code
