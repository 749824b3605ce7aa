"""Shared fixtures, and the ``slow`` mark of the tests that start whole
systems. Helpers live in tests/support.

Helpers are imported inside the fixtures that use them: the PostgreSQL and
SMTP ones need asyncpg (the ``postgres`` extra) and cryptography (``dev``),
the nats-server one the hub's code, none of which a test of the runtime
alone needs to be collected.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from tests.support.launch.bytecode import compile_product
from tests.support.launch.ports import PORTS_ENV, claim_run_ports, share, show, worker_ports

if TYPE_CHECKING:
    from tests.support import NatsServerProcess
    from tests.support.servers.postgres import PostgresServer
    from tests.support.servers.smtp import SmtpServer

SLOW_FOLDERS = frozenset({"e2e", "faults"})
"""Folders of tests/ whose every test is ``slow``: real processes, whole
systems, injected faults (``pytest -m "not slow"`` leaves them out)."""


WHOLE_SYSTEMS = "whole_systems"
"""The xdist groups of the slow folders' tests, one a module
(``whole_systems-faults-test_matrix``,
``whole_systems-e2e-mail-test_smtp``, ...): a module's tests run one after the
other on one worker, the biggest modules first (``loadgroup`` orders its
units by size), and the in-process tests fill the gaps. One group for both
folders took a worker for the suite's whole wall time while the other
idled; one a folder still did for tests/e2e alone (563-617 s on one
worker, 321-422 s on two: docs/testing.md)."""


def pytest_configure(config: pytest.Config) -> None:
    """Ports of its own for this run and for each of its workers
    (tests/support/launch/ports.py): the controller, or a run without xdist, claims
    the run's (unless ``MAILRUN_PORTS`` names them already) before it starts
    the workers, which inherit the variable; each worker narrows it to its
    part. The process that runs the tests keeps half of its ports for
    itself and leaves the other half to every process a test starts. The
    controller first writes the product's bytecode
    (tests/support/launch/bytecode.py)."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        compile_product()  # once, before any worker or process a test starts
    if worker is not None:
        worker_ports(os.environ, worker["workerid"], int(worker["workercount"]))
    elif PORTS_ENV not in os.environ:
        ports, lock = claim_run_ports()
        os.environ[PORTS_ENV] = show(ports)
        if lock is not None:
            config.add_cleanup(lambda: os.close(lock))
    if worker is not None or not getattr(config.option, "numprocesses", None):
        share(os.environ)


# First: xdist's own hook reads the group marks this one adds.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``slow``: every test in a slow folder, and every test on a real
    PostgreSQL (the ``postgres_server`` fixture; the ``database`` fixture's
    PostgreSQL run is marked where it is parametrized). Other slow tests
    carry the mark themselves, with the reason beside it. The slow folders'
    tests share an xdist group a module (:data:`WHOLE_SYSTEMS`)."""
    tests = Path(__file__).parent
    watchdog: pytest.MarkDecorator | None = None
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if parts and parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
            # The module's whole path: two rooms may hold modules of one name.
            group = "-".join((WHOLE_SYSTEMS, *parts[:-1], item.path.stem))
            item.add_marker(pytest.mark.xdist_group(group))
            if item.get_closest_marker("timeout") is None:
                watchdog = watchdog or _whole_system_watchdog(config)
                item.add_marker(watchdog)
        elif "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


def _whole_system_watchdog(config: pytest.Config) -> pytest.MarkDecorator:
    """pytest-timeout's bound for a whole system's test: the suite's (120 s,
    pyproject.toml, or ``--timeout``; 0 leaves it off) and, on top, the start
    of `mailrun up` and a hub's restart as long as the product allows them
    (tests/support/launch/starts.py). At load 20-27 these tests took 85-134 s, an
    up's start and most a hub's restart among it: the suite's bound alone
    ended them, with a stack in the event loop's select, before the waits
    inside, bounded by the product, could either pass or say what failed."""
    from tests.support.launch.starts import HUB_RESTART_TIMEOUT, UP_START_TIMEOUT

    asked = config.getoption("timeout", None)
    base = float(asked if asked is not None else config.getini("timeout") or 0)
    if base <= 0:
        return pytest.mark.timeout(0)
    return pytest.mark.timeout(base + UP_START_TIMEOUT + HUB_RESTART_TIMEOUT)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServerProcess]:
    """A fresh nats-server per test (it starts in ~15 ms), free to kill and restart."""
    from tests.support import running_nats_server

    with running_nats_server(tmp_path) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (started in about a second)."""
    from tests.support.servers.postgres import PostgresServer

    server = PostgresServer()
    yield server
    server.stop()


# The PostgreSQL run is slow: a real server (once a session) and a fresh
# database per test; the SQLite run of the same test stays in the fast loop.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
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
    from tests.support.servers.smtp import SmtpServer

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
