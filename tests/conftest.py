"""Shared fixtures. Helpers live in tests/support."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support import NatsServerProcess, running_nats_server
from tests.support.postgres import PostgresServer
from tests.support.smtp import SmtpServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServerProcess]:
    """A fresh nats-server per test (it starts in ~15 ms), free to kill and restart."""
    with running_nats_server(tmp_path) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (started in about a second)."""
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's hub store lives: a SQLite file, then a fresh PostgreSQL
    database (the test runs once on each)."""
    if request.param == "sqlite":
        return str(tmp_path / "hub.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    """A real SMTP server (aiosmtpd) on a free loopback port, recording what it gets."""
    server = SmtpServer()
    server.start()
    yield server
    server.stop()


_OURS = ("hub", "sidecar", "mailrun", "nats-server")


def _leftovers() -> list[str]:
    """This pytest process's descendants that are mailrun's processes, alive."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            argv = child.cmdline()
        except psutil.Error:
            continue
        if any(word in part for part in argv for word in _OURS):
            found.append(f"{child.pid}: {' '.join(argv)}")
    return found


@pytest.fixture(autouse=True)
def no_process_outlives_its_test() -> Iterator[None]:
    """A test that starts a hub, a sidecar, `up` or a nats-server stops it: one
    left running reconnects forever (by design) and takes ports, which another
    test then finds busy."""
    yield
    deadline = time.monotonic() + 10
    left = _leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)  # a process told to stop is exiting: poll for it, bounded
        left = _leftovers()
    assert not left, "processes outlived their test:\n" + "\n".join(left)
