"""Failpoints: named places in production code where a test injects a fault.

Configured once per process from ``MAILRUN_FAILPOINTS``, e.g.::

    MAILRUN_FAILPOINTS="hub.after_dispatch_commit=crash;sidecar.after_inbox_commit=sleep(200)"

Actions: ``crash`` (``os._exit(86)``, no cleanup, like SIGKILL), ``sleep(ms)``,
``raise`` (:class:`FailpointError`), ``pause(path)`` (create
``<path>.reached``, then wait until ``path`` exists: a test waits for the
first file, lets the other party act, and creates the second, so two
parties interleave deterministically). An action
may be prefixed ``N*`` to fire only on the first N hits (``1*crash``).
Unset, a failpoint costs one dict lookup on an empty dict.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import anyio

from ._errors import FailpointError

ENV = "MAILRUN_FAILPOINTS"
CRASH_EXIT_CODE = 86
_SPEC = re.compile(
    r"^(?:(?P<times>\d+)\*)?(?P<action>crash|raise|sleep|pause)(?:\((?P<arg>[^)]*)\))?$"
)


@dataclass
class _Action:
    action: str
    arg: str
    remaining: int | None  # None: every hit


def parse(spec: str) -> dict[str, _Action]:
    """Parse ``name=action;...``; a malformed spec is a ValueError, never ignored."""
    points: dict[str, _Action] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, action = part.partition("=")
        m = _SPEC.match(action.strip())
        if not sep or not name.strip() or m is None:
            raise ValueError(f"bad failpoint {part!r} in {ENV}")
        times = m.group("times")
        arg = m.group("arg") or ""
        if m.group("action") == "sleep" and not arg.isdigit():
            raise ValueError(f"sleep needs milliseconds: {part!r}")
        if m.group("action") == "pause" and not arg:
            raise ValueError(f"pause needs a file path: {part!r}")
        points[name.strip()] = _Action(m.group("action"), arg, int(times) if times else None)
    return points


# Replaced by runtime.testing.configure_failpoints (tests of one process).
_points: dict[str, _Action] = parse(os.environ.get(ENV, ""))


def _take(name: str) -> _Action | None:
    point = _points.get(name)
    if point is None:
        return None
    if point.remaining is not None:
        if point.remaining <= 0:
            return None
        point.remaining -= 1
    return point


def failpoint(name: str) -> None:
    """A failpoint in synchronous code (``sleep``/``pause`` block the thread)."""
    if not _points:
        return
    point = _take(name)
    if point is None:
        return
    if point.action == "sleep":
        time.sleep(int(point.arg) / 1000)
    elif point.action == "pause":
        _reached(point.arg)
        while not os.path.exists(point.arg):
            time.sleep(0.005)
    else:
        _fire(name, point)


async def afailpoint(name: str) -> None:
    """A failpoint in async code (``sleep``/``pause`` yield to the event loop)."""
    if not _points:
        return
    point = _take(name)
    if point is None:
        return
    if point.action == "sleep":
        await anyio.sleep(int(point.arg) / 1000)
    elif point.action == "pause":
        _reached(point.arg)
        # The waited-for file comes from another process: no event to wait on.
        while not await anyio.Path(point.arg).exists():  # noqa: ASYNC110
            await anyio.sleep(0.005)
    else:
        _fire(name, point)


def _reached(gate: str) -> None:
    # Tiny and local: written in place, not worth a thread hop.
    with open(f"{gate}.reached", "a"):
        pass


def _fire(name: str, point: _Action) -> None:
    if point.action == "crash":
        os.write(2, f"failpoint {name}: crash\n".encode())
        os._exit(CRASH_EXIT_CODE)
    raise FailpointError(f"failpoint {name}")
