"""Waiting for a product process to start: as long as the product itself
waits, and not a moment once the process has died.

A start on a loaded 2-core machine takes what the product allows for it
(`mailrun up`'s hub answered 40 s after its spawn at load 20), so a test
that gives up sooner fails where the product would not; and a test that
polls a dead process waits out its whole bound and then says nothing of
why. The bounds are `mailrun up`'s own (docs/operations.md): 15 s for
nats-server to listen, 60 s for the hub's first ``/healthz``, and, for a
hub up restarts, its restart delay (at most the backoff's cap) first; 60 s
from a sidecar's start to its Welcome (``--sidecar-join-timeout``), past
which up starts it again.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from hub.up import UpSettings

from ..waiting import wait_for

T = TypeVar("T")

_UP = UpSettings(Path(), environ={})

NATS_START_TIMEOUT = _UP.nats_ready_timeout
"""Seconds `mailrun up` waits for nats-server to accept connections."""
HUB_START_TIMEOUT = _UP.hub_ready_timeout
"""Seconds `mailrun up` waits for a hub's first ``/healthz`` answer."""
UP_START_TIMEOUT = NATS_START_TIMEOUT + HUB_START_TIMEOUT
"""From `mailrun up`'s spawn to its hub's first answer: what up itself allows."""
HUB_RESTART_TIMEOUT = _UP.backoff.maximum + HUB_START_TIMEOUT
"""From a hub's death under `mailrun up` to the new hub's first answer: up's
longest restart delay, then a hub's start."""

SIDECAR_START_TIMEOUT = _UP.sidecar_join_timeout
"""Seconds `mailrun up` gives a sidecar from its start to its Welcome."""
SIDECAR_FIRST_MAIL_TIMEOUT = SIDECAR_START_TIMEOUT + 15.0
"""From a deployment's creation (or a sidecar's start) to its first mails
processed: a sidecar's start as up bounds it, then the mails' delivery and
handling (seconds on a loaded machine). Past it up itself would have given
up on the start."""

TAIL = 30
"""Lines of each log a failure shows."""


def tails(logs: Sequence[Path], lines: int = TAIL) -> str:
    """The last ``lines`` of each log that exists, each under its path."""
    shown = []
    for path in logs:
        if path.exists():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            shown.append(f"----- {path} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(shown) or f"(no log: {', '.join(map(str, logs)) or 'none named'})"


async def started(
    ready: Callable[[], T | Awaitable[T]],
    *,
    exit_code: Callable[[], int | None],
    logs: Sequence[Path] = (),
    timeout: float,
    what: str,
    interval: float = 0.02,
    since: Callable[[], float | None] | None = None,
) -> T:
    """``ready()``'s first true value, polled as ``wait_for`` polls.

    ``exit_code()`` is the process's exit code once it has exited (a
    ``Popen.poll``): then this fails at once, with that code and the tail of
    ``logs``, rather than waiting out ``timeout`` for an answer that cannot
    come. ``timeout`` runs from the call, or from ``since()`` once it names a
    moment (``time.time()``): where the product starts its own clock (`mailrun
    up` its bounds when it spawns nats-server, after its own imports). A
    timeout shows the tails too.
    """
    called = time.time()

    async def probe() -> T | None:
        value = ready()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        code = exit_code()
        if code is not None:
            raise AssertionError(f"exited with {code} before {what}\n{tails(logs)}")
        begun = (since() if since is not None else None) or called
        if time.time() > begun + timeout:
            late = f"{time.time() - called:.1f}s from the call" if begun != called else ""
            raise AssertionError(
                f"timed out after {timeout}s{f' ({late})' if late else ''} waiting for {what}"
                f"\n{tails(logs)}"
            )
        return None

    # The deadline is probe's: it may move (``since``); fail_after(inf) only owns the loop.
    found = await wait_for(probe, timeout=math.inf, interval=interval, what=what)
    assert found is not None
    return found
