"""``python -m sidecar.forking --control-fd FD --room SPACES``: the fork server.

``mailrun up`` starts it with a sidecar's stripped environment (never the
hub's secrets: every sidecar forked from it shares its memory), one end of
a ``SOCK_SEQPACKET`` pair as ``FD``, and ``--room``, blanks that keep argv
space for the titles its sidecars take (``runtime.sidecar_contract``).
It ends when ``up`` closes its end; its sidecars die with it (each has
``PR_SET_PDEATHSIG`` against it), as it dies with ``up``.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import sys

# setproctitle reads this as it is imported: titles only overwrite argv,
# so /proc/PID/environ of a sidecar still shows the environment it was
# forked with (its own is os.environ, given by up).
os.environ["SPT_NOENV"] = "1"

# The sidecar's imports, once for every fork.
from ._server import serve


def main() -> int:
    # As a sidecar's own first line does: a nudge that comes early is lost,
    # never deadly (ignored stays ignored across fork).
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    p = argparse.ArgumentParser(prog="python -m sidecar.forking")
    p.add_argument("--control-fd", type=int, required=True)
    p.add_argument("--room", default="", help="argv space for the sidecars' titles")
    args = p.parse_args()
    if not sys.platform.startswith("linux"):
        print("the fork server needs Linux", file=sys.stderr)
        return 2
    control = socket.socket(fileno=args.control_fd)
    control.set_inheritable(False)
    # What the imports made lives as long as every sidecar forked from here:
    # out of the collector's sight, and its pages stay shared.
    gc.freeze()
    try:
        return serve(control)
    except (BrokenPipeError, ConnectionResetError):
        return 0  # up is gone


if __name__ == "__main__":
    sys.exit(main())
