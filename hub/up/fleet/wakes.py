"""``mailrun up``'s wake loop: a long poll of the hub's ``GET /workflows/wakes``
that starts the asleep deployments it names, through the fleet's slots.

The hub never starts processes; it only says which asleep deployments have
work. The loop outlives any hub outage
(backoff with jitter, so that many ``up`` do not retry in step), and a hub
without the route (an older release) is retried the same way.

Each question carries the cursor of the answer before, so the hub answers
at once only with news (work that came since), not with the names it gave
already: a deployment whose sidecar is starting stays on the list until it
is welcomed, and a wake meanwhile is started as soon as the hub has it.
While a name is held by a sidecar of ours (starting, or exiting asleep
just as work came) the poll is as long as a pause that grows from a
quarter of a second to a second, so that one is looked at again within it.
A hub that gives no cursor answers at once while it names anything: then
an answer that starts nothing is followed by that pause, so a name that
stays on the list for hours costs the hub a request a second at most. A
deployment named that this host has no sidecar for (another host's, or one
whose sidecar stopped for good) is said once, and looked at again only
after a backoff of its own (1 s doubling up to 30 s, jittered); one the hub
has stopped naming for five minutes is forgotten, so the memory is that of
the names the hub gave lately.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import anyio
import anyio.lowlevel

from runtime import Backoff, Retry, is_id

from ..._client import AsyncHubClient
from ..._errors import HubClientError
from .fleet import Fleet

WAKE_BACKOFF = Backoff(initial=0.2, maximum=10.0, jitter=True)
PAUSE = Backoff(initial=0.25, maximum=1.0, jitter=True)
"""How long a poll lasts while a name is held by a sidecar of ours; with a
hub that gives no cursor, the pause between an answer that started nothing
and the next question (such a hub names a woken deployment until its
sidecar is welcomed, and another host's until that host wakes it,
answering at once in the meantime)."""
STRANGER = Backoff(initial=1.0, maximum=30.0, jitter=True)
"""Between two looks at a deployment named that this host cannot start."""
NEWS_GAP = 0.05
"""Seconds between two questions at least, with a hub that waits for news."""
FORGET = 300.0
"""Seconds after which a stranger the hub no longer names is forgotten."""


@dataclass(slots=True)
class _Stranger:
    retry: Retry
    due: float  # when to look at it again
    named: float  # when the hub last named it


class Strangers:
    """The deployments the hub names that this host cannot start, each looked
    at again after its own backoff, and said once."""

    def __init__(self, backoff: Backoff, say: Callable[[str], None]) -> None:
        self._backoff = backoff
        self._say = say
        self._known: dict[str, _Stranger] = {}

    def __len__(self) -> int:
        return len(self._known)

    def due(self, dep: str, now: float) -> bool:
        """Whether to try ``dep`` now (the hub names it at ``now``)."""
        known = self._known.get(dep)
        if known is None:
            return True
        known.named = now
        return now >= known.due

    def failed(self, dep: str, now: float) -> None:
        """This host could not start ``dep``."""
        known = self._known.get(dep)
        if known is None:
            known = self._known[dep] = _Stranger(Retry(self._backoff), now, now)
            self._say(
                f"mailrun up: the hub names {dep} to wake, but no sidecar of it runs from"
                f" this host; looking again at most every {self._backoff.maximum:g} s"
            )
        known.due = now + known.retry.failed()

    def started(self, dep: str) -> None:
        self._known.pop(dep, None)

    def prune(self, now: float) -> None:
        for dep in [d for d, s in self._known.items() if now - s.named > FORGET]:
            del self._known[dep]


def wake(fleet: Fleet, strangers: Strangers, named: Sequence[str], now: float) -> bool:
    """Start (or queue) what the hub names that this host runs; whether
    anything was."""
    started = False
    for dep in named:
        # Ids become path components: only well-formed ones count.
        if not is_id(dep, "dep") or fleet.has(dep) or not strangers.due(dep, now):
            continue
        if fleet.wake(dep):
            strangers.started(dep)
            started = True
        else:
            strangers.failed(dep, now)
    strangers.prune(now)
    return started


async def wake_loop(
    fleet: Fleet,
    client: AsyncHubClient,
    *,
    wait: float,
    say: Callable[[str], None],
    backoff: Backoff = WAKE_BACKOFF,
    pause: Backoff = PAUSE,
    stranger: Backoff = STRANGER,
) -> NoReturn:
    """Start what the hub names, forever (``wait``: each long poll's, in seconds)."""
    retry = Retry(backoff)
    calm = Retry(pause)
    strangers = Strangers(stranger, say)
    cursor: str | None = None
    while True:
        asked = anyio.current_time()
        # A name held by a sidecar of ours (starting, or on its way out
        # asleep as work came) is looked at again within the pause, news or
        # not: the hub gives none when that one exits.
        poll = min(wait, calm.delay) if cursor is not None and calm.failures else wait
        try:
            named, cursor = await client.wakes_after(poll, cursor)
        except HubClientError as exc:
            if retry.failures == 0:
                say(f"mailrun up: cannot ask the hub which deployments to wake: {exc}")
            retry.failed()
            await retry.wait()
            continue
        if retry.failures:
            say("mailrun up: the hub answers again which deployments to wake")
        retry.succeeded()
        now = anyio.current_time()
        started = wake(fleet, strangers, named, now)
        if started:
            # The starts' first steps (the fork server's request) go before
            # the next question: that one wakes the hub, which would compete
            # for a core with the fork server's wake, and a wake's fork
            # waited behind it.
            await anyio.lowlevel.checkpoint()
        if cursor is not None:
            held = any(fleet.has(dep) for dep in named)
            # The hub answers at once only with news: no pause, but a gap,
            # so that a flood of mail to a deployment still starting costs
            # a question per gap at most.
            if held:
                calm.failed()
            else:
                calm.succeeded()
            if not started and now - asked < NEWS_GAP:
                await anyio.sleep(NEWS_GAP - (now - asked))
            continue
        # A hub without cursors answers at once while it names anything. A
        # long poll that ran out is asked again at once; an answer that came
        # at once and started nothing is not (nor an empty one that came at
        # once: a hub that does not wait).
        ran_out = not named and now - asked >= max(wait / 2, pause.initial)
        if started or ran_out:
            calm.succeeded()
        else:
            calm.failed()
            await calm.wait()
