"""Retry delays: exponential, capped, with jitter, shared by every retry loop."""

from __future__ import annotations

import random


def backoff(attempt: int, *, initial: float = 0.05, maximum: float = 1.0) -> float:
    """The delay before retry number ``attempt`` (1, 2, ...).

    ``initial`` doubles per attempt up to ``maximum``; the result is drawn from
    the upper half of that ("equal jitter"): never zero, so a failing peer is
    not hammered, and never the same for two clients, so they do not retry
    in lockstep after a shared outage.
    """
    ceiling = min(maximum, initial * 2.0 ** max(0, attempt - 1))
    return ceiling * random.uniform(0.5, 1.0)
