"""Retry delays: exponential, capped, with jitter, shared by every retry loop."""

from __future__ import annotations

import random
from dataclasses import dataclass

_MAX_EXPONENT = 1023
"""2.0 ** 1024 overflows a float; by then every ``maximum`` is long reached."""


@dataclass(frozen=True)
class Backoff:
    """The delay before retry number ``attempt`` (1, 2, ...): ``initial``
    doubling per attempt up to ``maximum``, for any attempt however large.

    With ``jitter`` the delay is drawn from the upper half of that ("equal
    jitter"): never zero, so a failing peer is not hammered, and never the same
    for two clients, so they do not retry in lockstep after a shared outage.
    """

    initial: float = 0.05
    maximum: float = 1.0
    jitter: bool = True

    def ceiling(self, attempt: int) -> float:
        """The delay without jitter."""
        exponent = min(max(0, attempt - 1), _MAX_EXPONENT)
        return min(self.maximum, self.initial * 2.0**exponent)

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """The delay to sleep; ``rng`` makes the jitter reproducible (a seeded workload)."""
        ceiling = self.ceiling(attempt)
        if not self.jitter:
            return ceiling
        draw = rng.random() if rng is not None else random.random()
        return ceiling * (0.5 + 0.5 * draw)


def backoff(attempt: int, *, initial: float = 0.05, maximum: float = 1.0) -> float:
    """``Backoff(initial, maximum).delay(attempt)``: one jittered delay."""
    return Backoff(initial, maximum).delay(attempt)
