"""Helpers for tests that need a real nats-server (the ``nats_server`` fixture uses them)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio

from hub.up.nats import NatsServerProcess


@contextmanager
def running_nats_server(log_dir: Path) -> Iterator[NatsServerProcess]:
    """A nats-server on a free loopback port, its log in ``log_dir``; stopped on exit."""
    server = NatsServerProcess(log_file=log_dir / "nats-server.log")
    server.start_sync()
    try:
        yield server
    finally:
        server.stop_sync()


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    timeout: float = 5.0,
    interval: float = 0.01,
) -> None:
    """Wait until ``condition()`` is true; fail with TimeoutError after ``timeout``."""
    with anyio.fail_after(timeout):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await anyio.sleep(interval)
