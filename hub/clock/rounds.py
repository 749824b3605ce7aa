"""The shape both clock loops share: a round that fires what is due and says
how long until the next due time, then a sleep until then or until woken,
and, when the store fails, a backoff before the next round, for as long as
the outage lasts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import NoReturn

from runtime import Retry, Wakeup

log = logging.getLogger("mailrun.hub.clock")

Round = Callable[[], Awaitable[float | None]]
"""Fire what is due; seconds until the next due time (0: more is due now;
None: nothing is pending at all)."""


async def run_rounds(
    round: Round,
    *,
    wakeup: Wakeup,
    retry: Retry,
    idle_look: float | None,
    what: str,
    on_error: Callable[[str | None], None],
) -> NoReturn:
    """Run ``round`` until cancelled. Between rounds, wait until the next due
    time or ``wakeup`` (a change committed after a round began is never
    slept past), capped at ``idle_look`` seconds when given (None: no look
    without a reason). A round that raises is ``what``'s failure, told to
    ``on_error`` (and None once a round succeeds again)."""
    while True:
        wakeup.clear()
        try:
            wait = await round()
        except Exception as exc:
            # The store failing (locked, disk full, the server gone): later, not never.
            error = f"{type(exc).__name__}: {exc}"
            on_error(error)
            log.warning("%s: %s; trying again in %.1f s", what, error, retry.failed())
            await retry.wait()
            continue
        retry.succeeded()
        on_error(None)
        if wait is not None and wait <= 0:
            continue
        if idle_look is not None:
            wait = idle_look if wait is None else min(wait, idle_look)
        await wakeup.wait(wait)
