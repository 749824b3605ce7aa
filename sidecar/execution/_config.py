"""The runs' settings: batching, restarts, the stop grace, and what each
handler's ``ctx`` gets: the clock and step faults (the test kit's own under
test) and the domain of the Message-IDs it sends."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from runtime.actors import RestartPolicy
from runtime.config import DEFAULT_MAIL_DOMAIN


@dataclass(frozen=True)
class RunsConfig:
    batch_limit: int = 256
    """Consecutive envelopes of one run handled per step (one commit)."""
    step_budget: float = 0.1
    """Seconds of handling after which a step takes no further envelope and
    commits: a backlog of quick items goes ``batch_limit`` to an fsync, slow
    ones still commit (and their events ship) about this often."""
    policy: RestartPolicy = field(default_factory=lambda: RestartPolicy(max_restarts=5, window=60))
    """Restarts of a run actor that broke on something else than a handler
    (the inbox, say); a handler's failures are attempts of its item, counted
    by the failure policy, and never crash the actor."""
    stop_grace: float = 5.0
    """On shutdown, how long a handler may take to finish its current batch."""
    now: Callable[[], float] = time.time
    """The handlers' clock (``ctx.now``, a timer set ``after`` a delay): the
    test kit's own, which it moves on, under test."""
    sleep: Callable[[float], Awaitable[Any]] = anyio.sleep
    """How a failing step waits before its next attempt (the test kit's returns at once)."""
    step_faults: Mapping[str, BaseException] = field(default_factory=dict)
    """Steps (by name) made to fail with these errors: the test kit's injected failures."""
    mail_domain: str = DEFAULT_MAIL_DOMAIN
    """The domain of the deployment's address (its restore record's): the
    right side of the Message-IDs ``ctx.send`` returns."""
