"""The fork server's loop: fork a sidecar for every ``Fork`` read from the
control socket, relay every child's end.

It has no thread and no event loop at any time, so a fork copies nothing
half-held: a blocking ``select`` over the control socket and the signal
wakeup pipe, which SIGCHLD writes to.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import threading

from runtime.sidecar_contract import (
    FORK_MAX_FRAME,
    Exited,
    Fork,
    Forked,
    ForkRefused,
    decode_request,
    encode_frame,
)

from ._child import run_forked

log = logging.getLogger("mailrun.sidecar.forking")


def serve(control: socket.socket) -> int:
    """Serve until ``mailrun up`` closes its end of ``control``; the exit code."""
    if threading.active_count() != 1:
        log.error("the fork server has threads: it cannot fork safely")
        return 1
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    # A Python handler, so that SIGCHLD is not ignored (its default) and the
    # wakeup pipe hears of it; the reaping is done in the loop.
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    server = os.getpid()
    sock = control.fileno()
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
            _reap(control)
        if sock in ready:
            data, fds, _flags, _addr = socket.recv_fds(control, FORK_MAX_FRAME, 1)
            if not data:
                return 0  # up is gone: so are we, and our sidecars after us
            _answer(control, data, fds, server)


def _answer(control: socket.socket, data: bytes, fds: list[int], server: int) -> None:
    log_fd = fds[0] if fds else None
    try:
        request = decode_request(data)
    except ValueError as exc:
        log.error("not a fork request: %s", exc)
        for fd in fds:
            os.close(fd)
        return
    try:
        pid = _fork(request, log_fd, control, server)
    except OSError as exc:
        control.send(encode_frame(ForkRefused(request.ask, str(exc))))
    else:
        control.send(encode_frame(Forked(request.ask, pid)))
    finally:
        for fd in fds:
            os.close(fd)


def _fork(request: Fork, log_fd: int | None, control: socket.socket, server: int) -> int:
    # Nothing buffered may be written twice, by the child as well.
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = run_forked(request, log_fd, control, server)
        finally:
            os._exit(code)
    return pid


def _reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        control.send(encode_frame(Exited(pid, code)))
