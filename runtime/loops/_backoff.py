"""Retry delays and a retry loop's bookkeeping: exponential, capped, with
jitter (:class:`Backoff`), counted and waited out in one place (:class:`Retry`).

A retry loop may run for as long as its peer is away, which may be months:
its delay stays finite for any attempt (the exponent is clamped) and its
attempt counter stops growing (:func:`next_attempt`), so nothing about a
loop changes with the length of an outage except how long it has waited.
Every retry loop of hub and sidecar keeps its count in a :class:`Retry`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

import anyio

from ..config import BACKOFF_MAX_ENV

log = logging.getLogger("mailrun.backoff")

_MAX_EXPONENT = 1023
"""2.0 ** 1024 overflows a float; by then every ``maximum`` is long reached."""

ATTEMPT_LIMIT: Final = 10_000
"""Where attempt counters stop: far past the attempt at which any delay
reaches its cap, yet a number a health report can show as it is."""


def next_attempt(attempt: int) -> int:
    """``attempt + 1``, saturating at :data:`ATTEMPT_LIMIT`."""
    return min(attempt + 1, ATTEMPT_LIMIT)


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

    def __post_init__(self) -> None:
        # A zero delay would let a retry loop spin; an infinite one would
        # end it: both are configuration errors, said at once.
        if not (0 < self.initial < math.inf and 0 < self.maximum < math.inf):
            raise ValueError(
                f"backoff needs positive, finite delays, not {self.initial}, {self.maximum}"
            )

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

    def capped(self, maximum: float | None) -> Backoff:
        """This policy with its delays at most ``maximum`` (None: as it is).

        How a process compresses time (``MAILRUN_BACKOFF_MAX``): every retry
        still happens, each one sooner.
        """
        if maximum is None or maximum >= self.maximum:
            return self
        return dataclasses.replace(self, initial=min(self.initial, maximum), maximum=maximum)


class Retry:
    """One retry loop's bookkeeping: the attempts that failed in a row, the
    delay before the next one, the wait for it, and the reset on success.

    ::

        retry = Retry(backoff)
        while True:
            try:
                await attempt()
            except Unavailable:
                retry.failed()
                await retry.wait(wakeup.wait)  # or retry.wait(): a plain sleep
                continue
            retry.succeeded()

    The count saturates at :data:`ATTEMPT_LIMIT` and the delay is capped, so
    a loop survives an outage of any length.
    """

    __slots__ = ("_rng", "backoff", "delay", "failures")

    def __init__(self, backoff: Backoff | None = None, *, rng: random.Random | None = None) -> None:
        self.backoff = backoff if backoff is not None else Backoff()
        self._rng = rng
        self.failures = 0
        """Attempts that failed since the last success (saturating)."""
        self.delay = 0.0
        """The delay the last failure drew: what :meth:`wait` waits."""

    def failed(self) -> float:
        """Count a failed attempt; the delay before the next one, drawn now
        (jitter included), so that what a loop announces is what it waits."""
        self.failures = next_attempt(self.failures)
        self.delay = self.backoff.delay(self.failures, rng=self._rng)
        return self.delay

    def succeeded(self) -> None:
        """An attempt went through: the next failure starts from ``initial``."""
        self.failures = 0
        self.delay = 0.0

    async def wait(self, until: Callable[[float], Awaitable[object]] | None = None) -> None:
        """Wait the delay the last failure drew. ``until``, given that delay,
        waits instead, when something may end the wait early: a peer that is
        back, new work (``Wakeup.wait``, ``Flag.wait``, ... each returns after
        that many seconds at most)."""
        if until is None:
            await anyio.sleep(self.delay)
        else:
            await until(self.delay)


def backoff(attempt: int, *, initial: float = 0.05, maximum: float = 1.0) -> float:
    """``Backoff(initial, maximum).delay(attempt)``: one jittered delay."""
    return Backoff(initial, maximum).delay(attempt)


def backoff_max_from_env(environ: Mapping[str, str]) -> float | None:
    """``MAILRUN_BACKOFF_MAX`` in seconds (None: unset): give it to
    :meth:`Backoff.capped`. Raises ``ValueError`` naming the variable for
    anything but a positive number. A set cap is logged as a WARNING: a
    process that compresses time must never pass for a normal one."""
    text = environ.get(BACKOFF_MAX_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise ValueError(f"{BACKOFF_MAX_ENV} must be a positive number of seconds, got {text!r}")
    log.warning("%s=%g: every retry delay is capped at it (a test setting)", BACKOFF_MAX_ENV, value)
    return value
