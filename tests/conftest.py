"""Shared fixtures. Helpers live in natsfix.py (and other modules beside this one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from natsfix import running_nats_server

from hub.up.nats import NatsServerProcess


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServerProcess]:
    """A fresh nats-server per test (it starts in ~15 ms), free to kill and restart."""
    with running_nats_server(tmp_path) as server:
        yield server
