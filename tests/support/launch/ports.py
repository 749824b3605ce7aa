"""The ports a test listens on: each run of the suite on this machine gets a
range of its own, and each of its xdist workers a part of that range.

Tests kill servers and start them again on the same port. While such a port
is down it is free to anyone else choosing ports; another worker's
``mailrun up`` (or a second run of the suite beside this one) could take it,
and the killed system's clients would then reconnect to a stranger's server.
So no two choosers share ports: :func:`claim_run_ports` (the controller, or a
run without xdist) holds one of :data:`SLOTS` slices of the listener ports
for the run's lifetime (a lock file), :func:`worker_ports` splits it among
the workers, and the range goes into ``MAILRUN_PORTS``, which every
``mailrun up`` and ``mailrun demo`` a test starts reads (``--ports``), and
:func:`free_port` draws from. tests/conftest.py does the setting up.

Importing this module imports no hub code: tests/conftest.py does, at start.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

PORTS_ENV = "MAILRUN_PORTS"
"""``hub.up.PORTS_ENV``, named here without importing the hub (a test checks both agree)."""

SLOTS = 8
"""How many runs of the suite on one machine get ports of their own."""

LOWEST = 10000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOCKS = Path(tempfile.gettempdir()) / "mailrun-test-ports"


def listener_ports() -> range:
    """The ports below the OS's ephemeral range, where only listeners go (as
    hub/up/config/ports.py draws from by default)."""
    try:
        start = int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        start = 32768  # Linux's default
    return range(LOWEST, max(start, LOWEST + SLOTS * 64))


def part(ports: range, index: int, count: int) -> range:
    """The ``index``-th of ``count`` disjoint, nearly equal parts of ``ports``."""
    if not 0 <= index < count:
        raise ValueError(f"part {index} of {count}")
    size = len(ports) // count
    if size == 0:
        raise ValueError(f"{len(ports)} ports cannot be split {count} ways")
    return ports[index * size : (index + 1) * size]


def show(ports: range) -> str:
    """``ports`` as ``LOW-HIGH`` (what ``--ports`` reads)."""
    return f"{ports.start}-{ports.stop - 1}"


def parse(text: str) -> range:
    low, _, high = text.partition("-")
    return range(int(low), int(high) + 1)


def claim_run_ports(locks: Path = _LOCKS) -> tuple[range, int | None]:
    """This run's slice of the listener ports and the lock that holds it
    (close the descriptor to let it go; the process's end does too).

    The first slot no other run holds; when every one is held, the slot of
    this process id, unlocked: shared with another run, as all ports were
    before slots."""
    locks.mkdir(parents=True, exist_ok=True)
    for slot in range(SLOTS):
        fd = os.open(locks / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return part(listener_ports(), slot, SLOTS), fd
    return part(listener_ports(), os.getpid() % SLOTS, SLOTS), None


def worker_ports(environ: MutableMapping[str, str], worker_id: str, workers: int) -> range:
    """Narrow ``environ``'s run range to xdist worker ``worker_id``'s
    (``gw0``, ``gw1``...) part of it; that part."""
    index = int(worker_id.removeprefix("gw"))
    ports = part(parse(environ[PORTS_ENV]), index, workers)
    environ[PORTS_ENV] = show(ports)
    return ports


OWN_ENV = "MAILRUN_TEST_OWN_PORTS"
"""The ports the test process itself draws from (:func:`free_port`)."""


def share(environ: MutableMapping[str, str]) -> range:
    """Split ``environ``'s range between the test process (the first half,
    ``OWN_ENV``) and the processes it starts (the second, ``PORTS_ENV``);
    the first half. A test picks its hub's HTTP port before the ``mailrun
    up`` it starts picks its NATS port, and both test a port's freedom by
    binding it: from one range, ``up`` could take the port the hub was
    about to bind (its clients then knocking at nats-server)."""
    ports = parse(environ[PORTS_ENV])
    own = part(ports, 0, 2)
    environ[OWN_ENV], environ[PORTS_ENV] = show(own), show(part(ports, 1, 2))
    return own


def assigned_ports() -> range | None:
    """This process's ports (None outside a test run: bench/, say)."""
    text = os.environ.get(OWN_ENV) or os.environ.get(PORTS_ENV)
    return parse(text) if text else None


_handed: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now, from this process's ports, and one this
    process has not handed out before: a test that killed a server keeps
    its port to start it again, so no other server of the test may get it."""
    from hub.up import free_port as choose

    ports = assigned_ports()
    if len(_handed) > (len(ports) if ports is not None else 4096) // 2:
        _handed.clear()  # a long run: the oldest servers are long gone
    port = choose(host, ports, avoid=_handed)
    _handed.add(port)
    return port
