"""The TCP ports ``mailrun up`` and ``mailrun demo`` choose themselves: a free
one from a range (``--ports``, ``MAILRUN_PORTS``), or from below the OS's
ephemeral ports.

A port found free is only free until someone binds it: a process being
started takes seconds to, on a loaded machine. Two kinds of takers can come
first. An outgoing connection's source port comes from the ephemeral range,
so a port drawn from there can be taken by any connection made meanwhile:
the default draws from below it, where only listeners go. And another
program choosing ports the same way: two runs of the test suite side by
side, say, where one kills a server and restarts it on the same port while
the other's ``up`` finds that port free. A range of ports of its own for
each (``--ports``) keeps such neighbours apart.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Container
from pathlib import Path
from typing import Final

from runtime.config import DEFAULT_NATS_PORT, LOOPBACK

from ..._errors import NoFreePort
from .host import port_is_free

PORTS_ENV: Final = "MAILRUN_PORTS"
"""``LOW-HIGH``: the ports ``up`` and ``demo`` choose from (``--ports``)."""

_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000
_TRIES = 64


def ephemeral_ports() -> range:
    """The ports the OS hands out as source ports of outgoing connections."""
    try:
        low, high = (int(v) for v in _PORT_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def parse_ports(text: str) -> range:
    """``LOW-HIGH`` (both included, 1-65535) as a range; ``ValueError`` otherwise."""
    low, sep, high = text.strip().partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        first = last = 0
    if not sep or not 1 <= first <= last <= 65535:
        raise ValueError(f"expected LOW-HIGH, two ports 1-65535 with LOW <= HIGH, not {text!r}")
    return range(first, last + 1)


def show_ports(ports: range) -> str:
    """``ports`` as :func:`parse_ports` reads it."""
    return f"{ports.start}-{ports.stop - 1}"


def free_port(
    host: str = LOOPBACK, within: range | None = None, *, avoid: Container[int] = ()
) -> int:
    """A TCP port free on ``host`` right now, not in ``avoid``.

    From ``within`` when given (``NoFreePort`` when none of it is free);
    otherwise from below the ephemeral range, with the OS's pick as the
    fallback when nothing there is free."""
    rng = random.SystemRandom()
    if within is None:
        ephemeral = ephemeral_ports()
        below = range(_LOWEST, ephemeral.start)
        for _ in range(_TRIES if below else 0):
            port = rng.choice(below)
            if port not in avoid and port_is_free(port, host):
                return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            chosen: int = sock.getsockname()[1]
            return chosen
    for _ in range(min(_TRIES, len(within))):
        port = rng.choice(within)
        if port not in avoid and port_is_free(port, host):
            return port
    # Nearly full: look at every port once, from a random one on.
    start = rng.randrange(len(within)) if within else 0
    for i in range(len(within)):
        port = within[(start + i) % len(within)]
        if port not in avoid and port_is_free(port, host):
            return port
    raise NoFreePort(f"no port of {show_ports(within)} is free on {host}")


def embedded_nats_port(ports: range | None, host: str = LOOPBACK) -> int:
    """The port ``up``'s own nats-server listens on: a free one of ``ports``
    when given; otherwise NATS's own, 4222, when free, else a free one."""
    if ports is None and port_is_free(DEFAULT_NATS_PORT, host):
        return DEFAULT_NATS_PORT
    return free_port(host, ports)
