"""The event loop of every long-running mailrun process.

uvloop where it is installed (a dependency wherever it builds: Linux and
macOS): its loop, transports and timers are C, about a third less CPU per
request and per NATS message than asyncio's own (docs/performance.md).
``MAILRUN_LOOP=asyncio`` picks asyncio's loop instead, to rule
the loop out when something behaves differently.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Mapping

from ..config import LOOP_ENV

LOOPS = ("uvloop", "asyncio")


def loop_options(environ: Mapping[str, str]) -> dict[str, object]:
    """anyio's ``backend_options`` for ``MAILRUN_LOOP`` (``uvloop``, the
    default, or ``asyncio``); a ``ValueError`` naming the variable for
    anything else. Without uvloop installed, asyncio's loop."""
    value = environ.get(LOOP_ENV, "").strip().lower() or "uvloop"
    if value not in LOOPS:
        raise ValueError(f"{LOOP_ENV} must be uvloop or asyncio, got {environ[LOOP_ENV]!r}")
    if value == "uvloop" and importlib.util.find_spec("uvloop") is not None:
        return {"use_uvloop": True}
    return {}


def running_loop() -> str:
    """The name of the running event loop's implementation, for a start line."""
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]
