"""What ``mailrun up`` needs of its host: one ``up`` per state dir, the
environment its children run in, whether a port is free, and the hub's
listening sockets, which ``up`` holds across the hub's restarts."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path

from runtime.config import LOOPBACK, parse_host_port

from ..._errors import ListenerError, PortInUse, UpAlreadyRunning
from ..._listeners import bind_socket


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def hold_listeners(addresses: Mapping[str, str | None]) -> dict[str, socket.socket]:
    """A listening socket for each of ``addresses`` (option -> HOST:PORT, or
    None when not given), bound before anything starts and handed to every
    hub ``up`` starts (hub._listeners). ``PortInUse`` naming the option when
    another process listens on one: a hub that could not bind would only
    fail and be restarted, while the other process answered its clients."""
    held: dict[str, socket.socket] = {}
    try:
        for option, address in addresses.items():
            if address is None:
                continue
            where = parse_host_port(address)
            try:
                held[option] = bind_socket(where.host, where.port)
            except PortInUse:
                raise PortInUse(
                    f"{address} ({option}) is in use: another process listens there"
                ) from None
            except OSError as exc:  # a name that does not resolve, an address not this host's
                raise ListenerError(f"{address} ({option}) cannot be listened on: {exc}") from exc
    except BaseException:
        for sock in held.values():
            sock.close()
        raise
    return held


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
