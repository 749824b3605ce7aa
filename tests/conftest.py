"""Shared fixtures. Helpers live in tests/support."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import NatsServerProcess, running_nats_server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServerProcess]:
    """A fresh nats-server per test (it starts in ~15 ms), free to kill and restart."""
    with running_nats_server(tmp_path) as server:
        yield server
