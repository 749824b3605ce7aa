"""What a forked process does to become a sidecar, between ``fork()`` and the
sidecar's ``main``: everything ``mailrun up``'s spawn and the interpreter's
start would have given it, and nothing of the fork server's.

Runs in the child only, which leaves through ``os._exit`` and never returns
into the fork server's loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import traceback

import setproctitle

from runtime import python_m
from runtime.sidecar_contract import Fork

from .. import __main__ as entry

_PR_SET_PDEATHSIG = 1
# Resolved in the fork server, once: nothing to look up after a fork.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def run_forked(request: Fork, log_fd: int | None, control: socket.socket, server: int) -> int:
    """Become the sidecar ``request`` describes and run it; its exit code."""
    # Its own session: up's signals to it (SIGTERM, SIGUSR1) reach no other
    # sidecar, nor the fork server, and the terminal's reach none of them.
    os.setsid()
    if _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return 1
    if os.getppid() != server:  # the fork server died before prctl took effect
        return 1
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _own_fds(log_fd, control)
    # Before the environment changes: setproctitle reads SPT_NOENV (set by
    # the fork server) as it first writes.
    setproctitle.setproctitle(" ".join([*python_m("sidecar"), *request.argv]))
    _become(request.env)
    os.chdir(request.cwd)
    # What `python -m sidecar ARGV` would have had: main parses it, finds it
    # contained already, and does not execute itself again.
    sys.argv = [entry.__file__, *request.argv]
    try:
        code = entry.main(forked=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    # What the interpreter's exit would have done, which os._exit skips: the
    # log's handlers flushed (main's finally has shut tracing down).
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return int(code)


def _become(env: dict[str, str]) -> None:
    """``os.environ`` made ``env``, which differs from the fork server's (a
    sidecar's environment too) in a name or two: only those are unset or set,
    each a ``putenv``, where clearing and filling it again made some forty."""
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _own_fds(log_fd: int | None, control: socket.socket) -> None:
    """stdin on /dev/null, stdout and stderr on its log, every other
    descriptor of the fork server's closed (its control socket among them)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    if log_fd is not None:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
    # The socket object must not close its number later, when it may be
    # one of the sidecar's own files.
    control.detach()
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
