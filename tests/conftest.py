"""Shared fixtures. Helpers live in tests/support."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import NatsServerProcess, running_nats_server
from tests.support.smtp import SmtpServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServerProcess]:
    """A fresh nats-server per test (it starts in ~15 ms), free to kill and restart."""
    with running_nats_server(tmp_path) as server:
        yield server


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    """A real SMTP server (aiosmtpd) on a free loopback port, recording what it gets."""
    server = SmtpServer()
    server.start()
    yield server
    server.stop()
