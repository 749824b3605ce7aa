"""Retry delays: exponential, capped, with jitter, shared by every retry loop.

``MAILRUN_BACKOFF_SCALE`` (read once, when runtime is imported) multiplies
every delay of the process by a number in (0, 1]. It exists for tests of long
outages: with 0.025, a 20-minute outage runs in 30 s and every retry loop
makes as many attempts in it as in the real 20 minutes, none skipped. Timers
that are not retry delays (request timeouts, leases, pings) keep their length.
"""

from __future__ import annotations

import logging
import math
import os
import random
from dataclasses import dataclass

from ._config import BACKOFF_SCALE_ENV

log = logging.getLogger(__name__)

_MAX_EXPONENT = 1023
"""2.0 ** 1024 overflows a float; by then every ``maximum`` is long reached."""


def _scale_from(text: str) -> float:
    if not text.strip():
        return 1.0
    try:
        scale = float(text)
    except ValueError:
        scale = math.nan
    if not 0.0 < scale <= 1.0:
        log.warning("ignoring %s=%r: expected a number above 0, at most 1", BACKOFF_SCALE_ENV, text)
        return 1.0
    if scale < 1.0:
        log.warning("%s=%g: every retry delay is scaled (a test setting)", BACKOFF_SCALE_ENV, scale)
    return scale


_SCALE = _scale_from(os.environ.get(BACKOFF_SCALE_ENV, ""))


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
        """The delay without jitter (times ``MAILRUN_BACKOFF_SCALE``, if set)."""
        exponent = min(max(0, attempt - 1), _MAX_EXPONENT)
        return min(self.maximum, self.initial * 2.0**exponent) * _SCALE

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
