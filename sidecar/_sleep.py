"""Scale to zero, the sidecar's part: after ``--idle-stop`` seconds with
nothing to do, stop taking deliveries and ask the hub to sleep.

Idle means: no work in progress on the link's :class:`~sidecar.link.Activity`
(no request to the hub in flight, no batch of frames being stored, no
version loading, a session held), the runs at rest (no handler running, no
retry waiting out its backoff), and the inbox at rest (no item pending, no
held item its run has let go of; every event acknowledged by the hub). An
item a run waiting for a decision, or suspended, still holds does not keep
the sidecar awake: what lets it go is a new dispatch, which wakes the
deployment at the hub.

The idle clock is a deadline, not a poll: work only stamps the time it
ended (``Activity.last``), and the one task here sleeps until that time plus
the idle time, then looks again at the stamp before it looks at anything
else. A check that finds work still going (a long handler call, events the
hub has not taken yet) waits a whole idle time more, unless work ends
before and moves the deadline: an idle sidecar wakes once per idle time at
most, a sleeping one never.

To ask, it first closes the door (``Activity.taking``: a mail frame that
comes after that waits there, neither stored nor answered, for the hub's
answer: a refusal opens the door and the frame is stored and answered
within the hub's timeout; a grant stops the process and the hub delivers
it to the next one), then sends ``Sleep``. ``Asleep``: the process
stops as on SIGTERM (``on_asleep``), and exits with ``SidecarExit.ASLEEP``;
unless a hello crossed the Sleep (a hub restart, a reconnect), whose Welcome
wakes the deployment at the hub: then it serves on, as after a refusal.
Any other answer, or none, opens the door again and starts the idle clock
again, no earlier than a backoff that grows while the hub keeps saying no
(a refusal for the session makes the link say hello, as for any request).

:meth:`Sleeper.nudge` (SIGUSR1, which ``mailrun up`` sends while starts wait
for a slot) skips the rest of the idle time if the sidecar is idle at that
moment or becomes idle within ``NUDGE_HOLDS`` seconds, never the backoff
after a refusal: ``up`` counts a nudged sidecar as on its way out for a
second, and one busy when nudged (most are: they were woken for their
mail) used to keep its slot until the next nudge, up to a second after its
work had ended. A nudge before the sidecar has a session is dropped: its
deployment's mail comes after the Welcome.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import anyio

from runtime import Asleep, Backoff, Flag, Reason, Retry, Wakeup

from ._errors import HubUnavailable
from .link import Activity, HubLink
from .storage import Inbox

log = logging.getLogger("mailrun.sidecar.sleep")

REFUSED = Backoff(initial=1.0, maximum=60.0)
"""Between asks the hub did not grant: a busy hub is not asked in a loop."""
NUDGE_HOLDS = 1.0
"""Seconds a nudge that found the sidecar busy waits for it to be idle
(``mailrun up`` nudges again after as long: hub/up/fleet/fleet.py)."""
NUDGE_LOOK = 0.05
"""Seconds between two looks at the work while a nudge holds (work stamps
when it ends; it wakes nobody)."""


class Sleeper:
    """The idle clock and the ask (:meth:`run`), and the nudge (:meth:`nudge`)."""

    def __init__(
        self,
        *,
        idle_stop: float,
        link: HubLink,
        runs_idle: Flag,
        inbox: Inbox,
        on_asleep: Callable[[], None],
        backoff: Backoff = REFUSED,
    ) -> None:
        if idle_stop <= 0:
            raise ValueError(f"an idle time must be positive, not {idle_stop}")
        self._idle_stop = idle_stop
        self._link = link
        self._activity: Activity = link.activity
        self._runs_idle = runs_idle
        self._inbox = inbox
        self._on_asleep = on_asleep
        self._refused = Retry(backoff)
        self._nudged = Wakeup()
        self._nudge_until = -math.inf  # a nudge holds until then
        self.asks = 0
        """Sleep requests sent."""
        self.declined = 0
        """Idle clocks that ran out while there was still something to do."""

    def nudge(self) -> None:
        """Sleep as soon as idle, within ``NUDGE_HOLDS`` (SIGUSR1): skip the
        rest of the idle time."""
        if self._link.session is None:
            return  # still joining: its mail comes after the Welcome
        self._nudge_until = anyio.current_time() + NUDGE_HOLDS
        self._nudged.set()

    async def run(self) -> None:
        """Until the hub grants a Sleep (then ``on_asleep`` is called)."""
        quiet_from = anyio.current_time()  # the idle time counts from here at the earliest
        not_before = quiet_from  # the backoff after a refusal
        asked_at = 0.0
        looked = -math.inf  # the last look that found something to do
        while True:
            now = anyio.current_time()
            due = max(max(self._activity.last, quiet_from) + self._idle_stop, not_before)
            if now < due:
                held = now < self._nudge_until
                look = max(not_before, looked + NUDGE_LOOK)
                if not (held and now >= look and self._idle_now()):
                    wait = due - now
                    if held:  # look again soon: work that ends wakes nobody
                        wait = min(wait, max(NUDGE_LOOK, look - now))
                    await self._nudged.wait(wait)
                    continue  # the deadline came, or a nudge: work may have moved it
            if self._activity.last > asked_at:
                self._refused.succeeded()  # things moved since the hub said no
            if not self._idle_now() or not await self._ask():
                self.declined += 1
                quiet_from = looked = anyio.current_time()
                continue
            self._nudge_until = -math.inf  # a nudge makes one ask at most
            session = self._link.session
            reply = await self._reply()
            asked_at = anyio.current_time()
            if isinstance(reply, Asleep):
                if not self._activity.working and self._link.session == session:
                    log.info("the hub granted the sleep: stopping")
                    self._on_asleep()
                    return
                # A hello crossed the Sleep: its Welcome wakes the deployment
                # at the hub, so this process stays to serve it.
                reply = "a hello crossed it"
            self._activity.taking = True
            quiet_from = anyio.current_time()
            not_before = quiet_from + self._refused.failed()
            log.info(
                "the hub did not grant the sleep (%s): taking deliveries again;"
                " asking again after %.1f s idle, in %.1f s at the earliest",
                reply,
                self._idle_stop,
                not_before - quiet_from,
            )

    def _idle_now(self) -> bool:
        """What the sidecar knows without reading its inbox: nothing in progress."""
        return (
            not self._activity.working
            and self._runs_idle.is_set()
            and self._link.session is not None
        )

    async def _ask(self) -> bool:
        """Close the door, then make sure the inbox is at rest; False (the
        door open again) when something is left to do."""
        # Closed right after the look at the work in progress, with no await
        # between: a batch of frames that starts later finds it closed.
        self._activity.taking = False
        if await self._inbox.at_rest() and self._idle_now():
            return True
        self._activity.taking = True
        return False

    async def _reply(self) -> Asleep | str:
        """The hub's answer to a Sleep: Asleep, or why not."""
        self.asks += 1
        log.info("nothing to do: asking the hub to sleep")
        try:
            reply = await self._link.sleep()
        except HubUnavailable as exc:
            return str(exc)
        if isinstance(reply, Asleep):
            return reply
        if reply.reason == Reason.BUSY:
            return f"{reply.reason}: {reply.detail}" if reply.detail else str(reply.reason)
        return f"refused: {reply.reason} {reply.detail}".rstrip()
