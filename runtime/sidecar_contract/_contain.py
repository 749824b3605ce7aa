"""Workflow containment: what a sidecar process, which runs the user's code, gets.

A sidecar runs the deployment's workflow in its own process, as the same OS
user as ``mailrun up`` (docs/security.md says what that isolates and what it
does not). Before it loads that code the process has:

- a stripped environment (:func:`sidecar_env`): the few variables it needs
  (``OTEL_*`` among them: whether and where it sends its traces), never the
  rest of the operator's (cloud keys, tokens, ``MAILRUN_*`` settings meant
  for other parts);
- its own state directory as working directory and ``HOME``;
- hard resource limits (:class:`Limits`): address space and open files.
  CPU time per handler call is bounded by the sidecar's handler timeout.

``mailrun up`` spawns sidecars with this environment; a sidecar started any
other way re-executes itself with it, so ``/proc/PID/environ`` never holds
more either. Both take the rules from here.

Why in runtime, which holds no process control: this is the one rule the
spawning side (``hub/up``) and the spawned side (``sidecar/__main__``) must
agree on, and they never import each other. In hub, the sidecar would have
to import hub; in sidecar, hub would; a copy on each side would drift, and a
sidecar spawned with one list but checking another would re-execute itself
or keep a variable it should not. What is here starts, waits for and stops
no process: it computes an environment and lowers the calling process's own
limits. Spawning stays with ``hub/up``, re-executing with ``sidecar``.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..config import (
    BACKOFF_MAX_ENV,
    LOG_LEVEL_ENV,
    LOOP_ENV,
    NATS_URL_ENV,
    SQLITE_SYNCHRONOUS_ENV,
)
from ..failpoints import ENV as FAILPOINTS_ENV

SIDECAR_MAX_MEMORY_ENV: Final = "MAILRUN_SIDECAR_MAX_MEMORY"
SIDECAR_MAX_FILES_ENV: Final = "MAILRUN_SIDECAR_MAX_FILES"
SIDECAR_PASS_ENV: Final = "MAILRUN_SIDECAR_PASS_ENV"
"""Comma-separated names of further variables every sidecar gets (an API key
the operator's workflows need): an explicit choice, never the default."""

DEFAULT_SIDECAR_MAX_MEMORY: Final = 4 * 1024**3
"""Address space, bytes. Mapped counts, resident or not: an idle sidecar maps
about 0.2 GiB, and each worker thread (up to 40) reserves a stack and a malloc
arena, about 72 MiB more (docs/security.md)."""
DEFAULT_SIDECAR_MAX_FILES: Final = 1024

_KEPT: Final = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "SSL_CERT_FILE",  # a tls:// NATS with a private CA
        "SSL_CERT_DIR",
        "PYTHONPATH",  # `mailrun up` from a checkout puts the checkout here
        "PYTHONUNBUFFERED",
        LOG_LEVEL_ENV,
        NATS_URL_ENV,  # may hold the NATS password: the sidecar's own connection
        FAILPOINTS_ENV,
        BACKOFF_MAX_ENV,
        SQLITE_SYNCHRONOUS_ENV,
        LOOP_ENV,
        SIDECAR_MAX_MEMORY_ENV,
        SIDECAR_MAX_FILES_ENV,
        SIDECAR_PASS_ENV,
    }
)


def sidecar_argv(
    state_dir: Path, deployment_id: str, *, takeover: bool = False, idle_stop: float = 0.0
) -> list[str]:
    """The arguments (after ``python -m sidecar``) a sidecar runs with: the
    ones ``mailrun up`` passes and the ones a sidecar started otherwise
    re-executes itself with. One spelling for both, so that a sidecar of
    ``up`` never re-executes (a second interpreter boot on every start and
    every wake)."""
    argv = ["--state-dir", str(state_dir), "--deployment", deployment_id]
    if takeover:
        argv.append("--takeover")
    if idle_stop:
        argv += ["--idle-stop", f"{idle_stop:g}"]
    return argv


def sidecar_env(environ: Mapping[str, str], *, home: Path) -> dict[str, str]:
    """The environment a sidecar whose state directory is ``home`` runs with,
    taken from ``environ`` (the one it would otherwise inherit)."""
    passed = {n.strip() for n in environ.get(SIDECAR_PASS_ENV, "").split(",") if n.strip()}
    env = {
        name: value
        for name, value in environ.items()
        if name in _KEPT or name in passed or name.startswith(("LC_", "OTEL_"))
    }
    env["HOME"] = str(home)
    return env


@dataclass(frozen=True)
class Limits:
    """Hard resource limits of a sidecar process; None leaves one as it is."""

    address_space: int | None = DEFAULT_SIDECAR_MAX_MEMORY
    open_files: int | None = DEFAULT_SIDECAR_MAX_FILES

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Limits:
        """The defaults, overridden by ``MAILRUN_SIDECAR_MAX_MEMORY`` (bytes) and
        ``MAILRUN_SIDECAR_MAX_FILES``; ``0`` lifts that limit. Raises
        ``ValueError`` naming the variable for anything but a whole number."""
        return cls(
            address_space=_limit(environ, SIDECAR_MAX_MEMORY_ENV, DEFAULT_SIDECAR_MAX_MEMORY),
            open_files=_limit(environ, SIDECAR_MAX_FILES_ENV, DEFAULT_SIDECAR_MAX_FILES),
        )

    def apply(self) -> None:
        """Lower the soft and the hard limit of this process (for good: an
        unprivileged process cannot raise a hard limit again), never raise one."""
        for which, value in (
            (resource.RLIMIT_AS, self.address_space),
            (resource.RLIMIT_NOFILE, self.open_files),
        ):
            if value is None:
                continue
            _soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))


def _limit(environ: Mapping[str, str], name: str, default: int) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{name} must be a whole number (0: no limit), got {text!r}")
    return int(text) or None
