"""A real nats-server admitting the hub and some deployments by their nkey
identities, with the permissions mailrun gives them (hub.natsauth)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from hub.natsauth import (
    DeploymentUser,
    ProducerUser,
    UserKey,
    new_user_key,
    render_authorization,
)
from runtime import Subjects, new_id

from .nats import NatsServerProcess


@dataclass
class AuthorizedServer:
    server: NatsServerProcess
    hub: UserKey
    deployments: dict[str, UserKey]
    subjects: Subjects = field(default_factory=Subjects)
    producers: dict[str, UserKey] = field(default_factory=dict)
    """Producers admitted, by id (``admit_producer``)."""

    def write(self) -> None:
        users = [DeploymentUser(dep, key.public) for dep, key in self.deployments.items()]
        producers = [ProducerUser(prd, key.public) for prd, key in self.producers.items()]
        text = render_authorization(self.hub.public, users, self.subjects, producers)
        assert self.server.config_file is not None
        self.server.config_file.write_text(text)

    def log_tail(self, lines: int = 40) -> str:
        log = self.server.log_file
        if log is None or not log.exists():
            return "(no server log)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    async def revoke(self, deployment_id: str) -> None:
        """Remove a deployment's user and reload, as ``up`` does on delete;
        returns once the server has applied the reload."""
        del self.deployments[deployment_id]
        self.write()
        await self.server.reload_applied()

    async def admit_producer(self, producer_id: str, key: UserKey) -> None:
        """Add a producer's user and reload, as ``up`` does when one is added;
        returns once the server has applied the reload: a client that
        connects while a reload runs may be closed right after it was admitted."""
        self.producers[producer_id] = key
        self.write()
        await self.server.reload_applied()

    async def revoke_producer(self, producer_id: str) -> None:
        """Remove a producer's user and reload, as ``up`` does when one is removed;
        returns once the server has applied the reload."""
        del self.producers[producer_id]
        self.write()
        await self.server.reload_applied()


@asynccontextmanager
async def authorized_server(
    tmp_path: Path, *names: str, producers: int = 0
) -> AsyncIterator[AuthorizedServer]:
    """A server admitting the hub, one deployment per name (its id is
    ``AuthorizedServer.deployments``' key, in the order of ``names``) and
    ``producers`` producers (``AuthorizedServer.producers``)."""
    server = NatsServerProcess(
        config_file=tmp_path / "authorization.conf", log_file=tmp_path / "nats.log"
    )
    auth = AuthorizedServer(
        server,
        new_user_key(),
        {new_id("dep"): new_user_key() for _ in names},
        producers={new_id("prd"): new_user_key() for _ in range(producers)},
    )
    auth.write()
    async with server:
        yield auth


@dataclass
class Peer:
    """A raw nats-py client: what an attacker holding some credentials runs."""

    client: Client
    errors: list[str]

    async def close(self) -> None:
        await self.client.close()

    async def flush(self) -> None:
        """Return once the server has processed everything sent before.

        nats-py writes a flush's PING straight to the socket, ahead of the
        commands its flusher task has not written yet (a SUB, say), so one
        PONG does not prove the server has them; the flusher runs during the
        first round trip, so the second PING is behind them (as in
        ``runtime``'s NATS transport)."""
        await self.client.flush()
        await self.client.flush()

    def describe(self) -> str:
        c = self.client
        return (
            f"connected={c.is_connected} closed={c.is_closed} last_error={c.last_error!r} "
            f"stats={c.stats} errors={self.errors}"
        )


def explain(auth: AuthorizedServer, **peers: Peer) -> Callable[[], str]:
    """What a failed wait reports: each client's state and the server's log."""

    def text() -> str:
        states = [f"{name}: {p.describe()}" for name, p in peers.items()]
        return "\n".join([*states, "nats-server log:", auth.log_tail()])

    return text


@asynccontextmanager
async def peer(url: str, seed: str | None, **options: Any) -> AsyncIterator[Peer]:
    """A connected client, or the server's refusal raised (``nats.errors.Error``)."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    client = Client()
    try:
        await client.connect(
            url,
            nkeys_seed_str=seed,
            error_cb=on_error,
            allow_reconnect=False,
            connect_timeout=2,
            **options,
        )
        yield Peer(client, errors)
    finally:
        await client.close()


async def refusal(url: str, seed: str | None) -> str:
    """Why the server refuses a connection with these credentials ("" if it does not)."""
    try:
        async with peer(url, seed):
            return ""
    except nats.errors.Error as exc:
        return str(exc)


async def admitted(url: str, seed: str) -> bool:
    """Whether the server admits these credentials now: False while it
    refuses them, or closes the connection because a reload is under way."""
    try:
        return not await refusal(url, seed)
    except OSError:
        return False


def collector(into: list[Msg]) -> Callable[[Msg], Awaitable[None]]:
    async def collect(msg: Msg) -> None:
        into.append(msg)

    return collect
