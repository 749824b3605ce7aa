"""``mailrun up``'s wake loop: a long poll of the hub's ``GET /workflows/wakes``
that starts the asleep deployments it names, through the fleet's slots.

The hub never starts processes; it only says which asleep deployments have
work. The loop outlives any hub outage (backoff with jitter, so that many
``up`` do not retry in step), and a hub without the route (an older release)
is retried the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import anyio

from runtime import Backoff, Retry, is_id

from .._client import AsyncHubClient
from .._errors import HubClientError
from .fleet import Fleet

WAKE_BACKOFF = Backoff(initial=0.2, maximum=10.0, jitter=True)
# The hub names a woken deployment until its sidecar is welcomed: it would
# answer at once, again and again, in the meantime.
_RECHECK = 0.25


async def wake_loop(
    fleet: Fleet,
    client: AsyncHubClient,
    *,
    wait: float,
    say: Callable[[str], None],
    backoff: Backoff = WAKE_BACKOFF,
) -> NoReturn:
    """Start what the hub names, forever (``wait``: each long poll's, in seconds)."""
    retry = Retry(backoff)
    while True:
        try:
            named = await client.wakes(wait)
        except HubClientError as exc:
            if retry.failures == 0:
                say(f"mailrun up: cannot ask the hub which deployments to wake: {exc}")
            retry.failed()
            await retry.wait()
            continue
        if retry.failures:
            say("mailrun up: the hub answers again which deployments to wake")
        retry.succeeded()
        deployments = [dep for dep in named if is_id(dep, "dep")]
        started = [dep for dep in deployments if fleet.wake(dep)]
        if deployments and not started:
            await anyio.sleep(_RECHECK)
