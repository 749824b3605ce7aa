"""Opening the NATS transport: the URL checked, the first connect waited
for, the keeper task that replaces a client nats-py gave up on, and the
block's own exception raised as the block raised it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio

from ._nats import NatsTransport
from ._nats_edge import check_url
from ._nats_hooks import DEFAULT_BACKOFF
from ._protocol import Transport


@asynccontextmanager
async def open_nats(
    url: str,
    *,
    name: str,
    connect_timeout: float = 2.0,
    seed: str | None = None,
    inbox_prefix: str | None = None,
    backoff_max: float | None = None,
) -> AsyncIterator[Transport]:
    """Connect to NATS at ``url`` (waiting for the server as long as it takes).

    ``seed`` is the connection's nkey seed (its NATS identity; without one it
    connects anonymously or with the URL's user and password).
    ``inbox_prefix`` replaces ``_INBOX`` in the reply subjects of its
    requests (a sidecar's identity may subscribe only below its own).
    Every connect attempt, the first ones and those after a lost connection,
    waits its backoff first (up to 1 s; ``backoff_max`` lowers that cap),
    however long the server stays away.
    Cancel the surrounding scope to give up waiting: a server that refuses
    the credentials is retried like one that is down, since a config reload
    may admit them. Leaving the block closes the connection within a couple
    of seconds, whether or not the server is up.
    """
    check_url(url)
    transport = NatsTransport(
        url,
        name=name,
        connect_timeout=connect_timeout,
        seed=seed,
        inbox_prefix=inbox_prefix,
        backoff=DEFAULT_BACKOFF.capped(backoff_max),
    )
    await transport.connect()
    try:
        with as_raised():
            async with anyio.create_task_group() as tg:
                tg.start_soon(transport.keep, name=f"NATS keeper {name}")
                try:
                    yield transport
                finally:
                    tg.cancel_scope.cancel()
    finally:
        await transport.aclose()


@contextmanager
def as_raised() -> Iterator[None]:
    """What the block of ``open_nats`` raised, as it raised it: the keeper's
    task group wraps it in a group of one (the keeper itself raises nothing
    but cancellation). One level only: a group the block raised stays one."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        lone = group.exceptions[0]
        context, suppress = lone.__context__, lone.__suppress_context__
        try:
            raise lone
        finally:
            lone.__context__, lone.__suppress_context__ = context, suppress
