"""The start of every long-running mailrun process: its log set up, then what
it reads from its environment (:class:`ProcessSettings`).

The hub and the sidecar read the same few variables, with the same rules,
once, where the process starts (:func:`start_process`); everything below gets
the values handed down. Settings that make a process unlike a normal one (a
cap on its retry delays, commits that are not fsynced, failpoints) are said
in its log as WARNINGs, so the log is set up before anything is read.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from .config import DEFAULT_LOG_LEVEL, LOG_LEVEL_ENV
from .failpoints import check_failpoints
from .loops import backoff_max_from_env, loop_options
from .sqlite import Synchronous, sqlite_synchronous


def python_m(module: str) -> list[str]:
    """The argv that runs ``module`` in this interpreter as a mailrun process:
    ``python -P -m module``. ``-P`` keeps the working directory off
    ``sys.path``: a hub started where a folder named ``hub`` or ``runtime``
    lies, or a sidecar in the state dir its workflow writes to, imports
    mailrun's own code, never what lies there."""
    return [sys.executable, "-P", "-m", module]


LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class ProcessSettings:
    """What a hub or sidecar process reads from its environment at its start."""

    log_level: str = DEFAULT_LOG_LEVEL
    """``MAILRUN_LOG_LEVEL``: one of :data:`LOG_LEVELS`."""
    backend_options: Mapping[str, object] = field(default_factory=dict)
    """anyio's, for ``MAILRUN_LOOP`` (uvloop, or asyncio's loop)."""
    backoff_max: float | None = None
    """``MAILRUN_BACKOFF_MAX``: caps every retry delay (a test setting); None: unset."""
    sqlite_synchronous: Synchronous = Synchronous.FULL
    """``MAILRUN_SQLITE_SYNCHRONOUS``: ``FULL`` or ``NORMAL`` (a benchmark setting)."""


def start_process(environ: Mapping[str, str], *, say_failpoints: bool = True) -> ProcessSettings:
    """Set up the process's log (one line per event on stderr, at
    ``MAILRUN_LOG_LEVEL``), then read its settings from ``environ``.

    Raises a ``ValueError`` naming the variable that is wrong (a malformed
    ``MAILRUN_FAILPOINTS`` is one); the log is set up by then, at INFO when
    the level itself was it. ``say_failpoints``: log the armed failpoints
    (a process that re-executes itself leaves that to the one it becomes)."""
    text = environ.get(LOG_LEVEL_ENV, "").strip().upper() or DEFAULT_LOG_LEVEL
    level = text if text in LOG_LEVELS else DEFAULT_LOG_LEVEL
    logging.basicConfig(stream=sys.stderr, level=level, format=LOG_FORMAT)
    if text != level:
        given = environ[LOG_LEVEL_ENV]
        raise ValueError(f"{LOG_LEVEL_ENV} must be one of {', '.join(LOG_LEVELS)}, got {given!r}")
    check_failpoints(warn=say_failpoints)
    return ProcessSettings(
        log_level=level,
        backend_options=loop_options(environ),
        backoff_max=backoff_max_from_env(environ),
        sqlite_synchronous=sqlite_synchronous(environ, warn=True),
    )


__all__ = [
    "LOG_FORMAT",
    "LOG_LEVELS",
    "ProcessSettings",
    "start_process",
]
