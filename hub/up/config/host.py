"""What ``mailrun up`` needs of its host: one ``up`` per state dir, the
environment its children run in, and whether a port is free."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path

from runtime.config import LOOPBACK

from ..._errors import UpAlreadyRunning


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def state_lock(state_dir: Path) -> Iterator[None]:
    """One ``up`` per state dir: two would fight over the same sidecars."""
    fd = os.open(state_dir / "up.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UpAlreadyRunning(f"another `mailrun up` runs on {state_dir}") from None
        yield
    finally:
        os.close(fd)


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    env = {**environ, "PYTHONUNBUFFERED": "1"}
    # Children must run the same code as this supervisor. Installed, they find
    # it anyway; from a checkout, they need its root on their path.
    root = Path(__file__).resolve().parents[3]
    if root not in {Path(sysconfig.get_path(k)).resolve() for k in ("purelib", "platlib")}:
        paths = [str(root), *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env
