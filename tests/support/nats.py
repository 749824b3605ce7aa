"""Helpers for tests that need a real nats-server (the ``nats_server`` fixture uses them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
