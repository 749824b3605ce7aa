"""The deployment's run settings as ``mailrun deploy`` takes them: its
failure policy (``--on-failure``, ``--max-attempts``, ``--max-backoff``,
``--handler-timeout``) and ``--max-concurrent-runs``, sent to the hub as
given (the others keep their defaults, or, with ``--update``, their
values)."""

from __future__ import annotations

from typing import Any

import click

from ..base import F

_ON_FAILURE = ("suspend", "park", "fail")


def policy_options(fn: F) -> F:
    """``--on-failure``, ``--max-attempts``, ``--max-backoff``, ``--handler-timeout``,
    and ``--max-concurrent-runs`` (no failure setting, told to the sidecar alike)."""
    options = [
        click.option(
            "--max-concurrent-runs",
            type=int,
            help="Handler calls of the deployment at once, each of another run (1-1024,"
            " default 16).",
        ),
        click.option(
            "--handler-timeout",
            type=float,
            help="Seconds a handler call may run before it counts as failed (default 300).",
        ),
        click.option(
            "--max-backoff",
            type=float,
            help="Seconds at most between two attempts of an item (default 60).",
        ),
        click.option(
            "--max-attempts",
            type=int,
            help="Handler calls an item gets before --on-failure applies (default 5).",
        ),
        click.option(
            "--on-failure",
            type=click.Choice(_ON_FAILURE),
            help="Past the attempts: suspend the run (default), park the item, or fail the run.",
        ),
    ]
    for option in options:
        fn = option(fn)
    return fn


def policy_settings(**given: Any) -> dict[str, Any]:
    """The policy's settings given on the command line (the others unset)."""
    names = ("on_failure", "max_attempts", "max_backoff", "handler_timeout", "max_concurrent_runs")
    return {name: given[name] for name in names if given.get(name) is not None}
