"""Pacing: the runs that wait out a backoff before their next batch, each on
its own clock, so that one run's retries never hold back the others.

Two kinds of wait, both per run: the retry of an item whose handler call
failed (0.1 s doubling, with jitter, capped at the policy's ``max_backoff``:
:func:`retry_delay`), and the pause after a step whose actor broke on
something else than its handler (the inbox, say). A run in either is left
out of the scheduler's search until its time comes; nothing sleeps for it.
"""

from __future__ import annotations

import time

from runtime import Backoff, Retry
from runtime.wire import FailurePolicy

from ..storage import Pending

FIRST_RETRY = 0.1
"""Seconds before an item's first retry; each later one doubles it."""

TROUBLE = Backoff(initial=0.05, maximum=1.0)
"""Between steps whose actor broke on something else than its handler."""


def retry_delay(policy: FailurePolicy, attempts: int) -> float:
    """Seconds before the retry of an item that failed ``attempts`` times:
    0.1 s doubling, with jitter, at most ``max_backoff``."""
    if policy.max_backoff <= 0:
        return 0.0
    return Backoff(min(FIRST_RETRY, policy.max_backoff), policy.max_backoff).delay(attempts)


class Pacing:
    """The runs waiting out a backoff, by run id, on the monotonic clock."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._waited: dict[str, tuple[str, int]] = {}
        """Per run, the item and its failed attempts whose backoff was waited out."""
        self._trouble: dict[str, Retry] = {}

    def due(self) -> list[str]:
        """The runs whose backoff is over: they leave it."""
        now = time.monotonic()
        over = [r for r, until in self._until.items() if until <= now]
        for run_id in over:
            del self._until[run_id]
        return over

    def waiting(self) -> list[str]:
        """The runs in a backoff."""
        return list(self._until)

    def next_due(self) -> float | None:
        """Seconds until the first backoff ends (None: no run is in one)."""
        if not self._until:
            return None
        return max(0.0, min(self._until.values()) - time.monotonic())

    def hold_for_retry(self, policy: FailurePolicy, p: Pending) -> bool:
        """Whether the retry of ``p`` must wait first (the run is put in its
        backoff then): not when it never failed, when the policy applies now,
        or when that wait is over already."""
        if not p.attempts or p.attempts >= policy.max_attempts:
            self._waited.pop(p.run_id, None)
            return False
        if self._waited.get(p.run_id) == (p.dispatch_id, p.attempts):
            return False
        self._waited[p.run_id] = (p.dispatch_id, p.attempts)
        return self._hold(p.run_id, retry_delay(policy, p.attempts))

    def broke(self, run_id: str) -> None:
        """The run's step broke on something else than its handler: it
        pauses, longer each time in a row."""
        retry = self._trouble.setdefault(run_id, Retry(TROUBLE))
        retry.failed()
        self._hold(run_id, retry.delay)

    def succeeded(self, run_id: str) -> None:
        self._trouble.pop(run_id, None)

    def clear(self) -> None:
        """Forget every wait (the runs were taken over from the hub's state)."""
        self._until.clear()
        self._waited.clear()
        self._trouble.clear()

    def _hold(self, run_id: str, delay: float) -> bool:
        if delay <= 0:
            return False
        self._until[run_id] = time.monotonic() + delay
        return True
