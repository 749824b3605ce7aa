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
import concurrent.futures
import gc
import importlib
import os
import signal
import socket
import sys

import anyio
import msgspec

from runtime import FrameDecoder, RestoreRecord
from runtime.loops import loop_options

# setproctitle reads this before its first title: titles only overwrite argv,
# so /proc/PID/environ of a sidecar still shows the environment it was
# forked with (its own is os.environ, given by up).
os.environ["SPT_NOENV"] = "1"

# The sidecar's imports, once for every fork.
from ._server import serve

# What a sidecar imports only once it runs, beyond its own modules' imports.
_LATER_IMPORTS = ("anyio.streams.stapled", "anyio.streams.tls", "nkeys")
_LATER_NAMES = ((anyio, "open_signal_receiver"), (concurrent.futures, "ThreadPoolExecutor"))


async def _nothing() -> None:
    pass


def _warm_up() -> None:
    """Import here, once, what each sidecar would import in its first moments:
    anyio's backend and the event loop (a loop run and closed: none is left
    when it forks), the streams of its connection, nkeys (its NATS
    identity), the executor asyncio resolves names in. A fork that imports
    them pays their import again (about 40 % of a forked start's CPU).

    And msgspec's plan for each frame and the restore record: msgspec
    resolves a Struct's annotations (typing's forward references, a
    ``compile`` each) the first time a decoder of it is built, and keeps
    the plan on the class; a fork that builds its decoders finds them
    made (about a tenth of a forked start's CPU)."""
    try:
        options = loop_options(os.environ)
    except ValueError:
        options = {}  # each sidecar says so, in its own log
    anyio.run(_nothing, backend_options=options)
    for name in _LATER_IMPORTS:
        importlib.import_module(name)
    # Names whose modules their packages import on first use.
    for package, name in _LATER_NAMES:
        getattr(package, name)
    FrameDecoder()  # every frame, so every narrower decoder a sidecar builds
    msgspec.json.Decoder(RestoreRecord)


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
    _warm_up()
    # What the imports made lives as long as every sidecar forked from here:
    # out of the collector's sight, and its pages stay shared.
    gc.freeze()
    try:
        return serve(control)
    except (BrokenPipeError, ConnectionResetError):
        return 0  # up is gone


if __name__ == "__main__":
    sys.exit(main())
