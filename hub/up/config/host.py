"""What ``mailrun up`` needs of its host: one ``up`` per state dir, the
environment its children run in, whether a port is free, and the hub's
listening addresses not held by another process."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path

from runtime.config import LOOPBACK, parse_host_port

from ..._errors import PortInUse, UpAlreadyRunning


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listener_in_use(address: str) -> bool:
    """Whether another process listens on ``address`` (HOST:PORT) now. Bound
    as the hub's server binds (``SO_REUSEADDR``): a port whose last listener
    left connections in TIME_WAIT, as a hub just stopped does, is free to it."""
    where = parse_host_port(address)
    try:
        found = socket.getaddrinfo(
            where.host, where.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError:
        return False  # a name that does not resolve: the hub says so itself
    for family, kind, proto, _, sockaddr in found:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


def check_listeners(addresses: Mapping[str, str | None]) -> None:
    """``PortInUse`` when another process listens on one of ``addresses``
    (option -> HOST:PORT, or None when not given). Checked before anything starts: a hub that
    cannot bind only fails and is restarted, again and again, while the
    other process answers its clients in its place."""
    for option, address in addresses.items():
        if address is not None and listener_in_use(address):
            raise PortInUse(f"{address} ({option}) is in use: another process listens there")


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
