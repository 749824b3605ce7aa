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

Every failpoint in the code is named in :data:`REGISTERED` (a test checks
that the two agree), and a spec naming any other is refused: a misspelt
name would otherwise never fire, and the test relying on it would test
nothing. A malformed ``MAILRUN_FAILPOINTS`` arms nothing at import; each
process's entry calls :func:`check_failpoints`, which raises its error (the
process says so in one line and exits) and warns that failpoints are armed.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import anyio

from .errors import FailpointError, FailpointSpecError

log = logging.getLogger("mailrun.failpoints")

ENV = "MAILRUN_FAILPOINTS"
CRASH_EXIT_CODE = 86

REGISTERED: Final[Mapping[str, str]] = MappingProxyType(
    {
        # name: where it is (docs/faults.md says what each leaves behind)
        "hub.accept.before_commit": "hub/intake/group_commit.py",
        "hub.accept.after_commit": "hub/intake/group_commit.py",
        "hub.migration.after_step": "hub/store/schema/release_one.py",
        "hub.dispatch.before_publish": "hub/wire/delivery/sending.py",
        "hub.dispatch.after_publish": "hub/wire/delivery/sending.py",
        "hub.dispatch.before_settle": "hub/wire/delivery/sending.py",
        "hub.redeliver.before_put_back": "hub/wire/delivery/redelivery.py",
        "hub.events.before_commit": "hub/wire/events/events.py",
        "hub.events.after_commit": "hub/wire/events/events.py",
        "hub.hello.before_claim": "hub/wire/sessions/hello.py",
        "hub.hello.before_session": "hub/wire/sessions/hello.py",
        "hub.mint.before_claim": "hub/wire/requests/mint.py",
        "hub.relay.after_send": "hub/outbound/_relay.py",
        "hub.relay.after_refusal": "hub/outbound/_relay.py",
        "sidecar.inbox.after_commit": "sidecar/link/_delivery.py",
        "sidecar.handler.before": "sidecar/execution/_run_actor.py",
        "sidecar.handler.after": "sidecar/execution/_run_actor.py",
        "sidecar.run.before_commit": "sidecar/execution/_run_actor.py",
        "sidecar.run.after_commit": "sidecar/execution/_run_actor.py",
        "sidecar.step.recorded": "sidecar/execution/_runs.py",
        "sidecar.shipper.before_send": "sidecar/link/_shipper.py",
        "sidecar.shipper.after_ack": "sidecar/link/_shipper.py",
        "sidecar.shipper.before_mark": "sidecar/link/_shipper.py",
        "sidecar.record.before_rename": "runtime/sidecar_contract/_restore.py",
    }
)
"""Every failpoint in the code, and the module it is in."""
_SPEC = re.compile(
    r"^(?:(?P<times>\d+)\*)?(?P<action>crash|raise|sleep|pause)(?:\((?P<arg>[^)]*)\))?$"
)


@dataclass
class _Action:
    action: str
    arg: str
    remaining: int | None  # None: every hit
    spec: str  # as configured, for the warning that names it


def parse(spec: str) -> dict[str, _Action]:
    """Parse ``name=action;...``; a malformed spec, or one naming a failpoint
    that is not in :data:`REGISTERED`, is a :class:`FailpointSpecError`."""
    points: dict[str, _Action] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, action = (s.strip() for s in part.partition("="))
        m = _SPEC.match(action)
        if not sep or not name or m is None:
            expected = "NAME=[N*]crash|raise|sleep(MS)|pause(PATH)"
            raise FailpointSpecError(f"{ENV}: bad failpoint {part!r}: expected {expected}")
        if name not in REGISTERED:
            raise FailpointSpecError(f"{ENV}: unknown failpoint {name!r} (docs/faults.md)")
        times = m.group("times")
        arg = m.group("arg") or ""
        if m.group("action") == "sleep" and not arg.isdigit():
            raise FailpointSpecError(f"{ENV}: sleep needs milliseconds: {part!r}")
        if m.group("action") == "pause" and not arg:
            raise FailpointSpecError(f"{ENV}: pause needs a file path: {part!r}")
        remaining = int(times) if times else None
        points[name] = _Action(m.group("action"), arg, remaining, f"{name}={action}")
    return points


def _from_env() -> tuple[dict[str, _Action], FailpointSpecError | None]:
    try:
        return parse(os.environ.get(ENV, "")), None
    except FailpointSpecError as exc:
        return {}, exc  # raised by check_failpoints, where a process can say it


# Replaced by runtime.testing.configure_failpoints (tests of one process).
_points, _env_error = _from_env()


def check_failpoints(*, warn: bool = True) -> list[str]:
    """For the start of a process: raise the :class:`FailpointSpecError` of a
    malformed ``MAILRUN_FAILPOINTS``; with ``warn``, log a warning naming the
    armed ones (a process that injects faults must never pass for a normal
    one). Returns the armed specs."""
    if _env_error is not None:
        raise _env_error
    armed = [point.spec for point in _points.values()]
    if armed and warn:
        log.warning("failpoints armed (%s): %s", ENV, "; ".join(armed))
    return armed


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


__all__ = [
    "CRASH_EXIT_CODE",
    "ENV",
    "REGISTERED",
    "afailpoint",
    "check_failpoints",
    "failpoint",
    "parse",
]
