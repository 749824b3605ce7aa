"""The asleep deployments as this hub knows them, and the long polls of
``GET /workflows/wakes`` that wait for one of them to have work.

The set is memory: read from the store at boot, then kept by this hub's
grants (a Sleep) and Welcomes. Its one job is to make the poke cheap: every
accept of this hub passes through :meth:`Sleepers.poke` (the dispatcher's
wake), which costs a set lookup for an awake deployment, and wakes the
waiting polls only for an asleep one. What a poll answers always comes from
the store (``hub.store.deployments_to_wake``): the whole list (every asleep
deployment read) at most every ``reread`` seconds, shared by every poll,
since with several hubs on one PostgreSQL another hub may have accepted
the mail or granted the Sleep; between two, only the deployments this hub
heard of since (poked, or fallen asleep) are read again, each by its key,
and the rest of the answer is the last read's, less those welcomed (or
deleted) since.
So a wake's answer costs a read of the deployment it is for, not of the
2,000 asleep (about 2 ms of the loop that answers it).

A poll may carry the cursor of the answer its caller had before
(:meth:`Sleepers.wakes_after`): then names it has seen already do not
answer it at once, only work that came since (a poke of this hub after that
answer, or a name a re-read finds that the poll's first read had not), so
a caller that is starting what it was named waits for news instead of
asking again and again. A cursor is this hub's boot and the count of its
pokes; another hub's (or a restarted one's) counts as none.

A stopping hub ends the polls (:meth:`Sleepers.close`): each answers at
once, naming nothing, so that the HTTP server's graceful stop is not held
for the rest of a poll's wait (up to 30 s, cut at the server's grace). The
next hub names what this one would have.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from functools import partial

import anyio

from ...store import Store, asleep_deployments, deployments_to_wake

log = logging.getLogger("mailrun.hub.sleep")

MAX_WAIT = 30.0
"""The longest a poll of ``GET /workflows/wakes`` waits, in seconds."""
REREAD = 1.0
"""Seconds between two reads of the store while a poll waits."""


class Sleepers:
    """The asleep deployments, and the polls waiting for one of them to have work."""

    def __init__(self, store: Store, *, reread: float = REREAD) -> None:
        self._store = store
        self._reread = reread
        self._asleep: set[str] = set()
        # One event per generation: a poke sets it and starts the next, so
        # every poll that waits on it now is woken, and none misses one.
        self._poked = anyio.Event()
        self._generation = 0  # pokes so far: what a cursor counts
        self._boot = secrets.token_hex(4)
        self._found: list[str] = []  # what the reads so far name, longest asleep first
        self._read_at: float | None = None  # when the whole list was last read
        self._heard: set[str] = set()  # asleep ones poked or fallen asleep since
        self._closed = False

    def __contains__(self, deployment_id: object) -> bool:
        return deployment_id in self._asleep

    def __len__(self) -> int:
        return len(self._asleep)

    async def load(self) -> None:
        """Read the asleep deployments from the store (at boot)."""
        self._asleep = set(await self._store.read(asleep_deployments))
        self._read_at = None

    def poke(self, deployment_ids: Iterable[str]) -> None:
        """Dispatches were accepted for these deployments: a poll waiting for
        work looks again if any of them is asleep."""
        if not self._asleep:
            return
        heard = self._asleep.intersection(deployment_ids)
        if heard:
            self._heard |= heard
            self._wake_polls()

    def fell_asleep(self, deployment_id: str) -> None:
        """Its Sleep was granted. The polls look again: a dispatch accepted
        between the grant's commit and now poked nothing."""
        self._asleep.add(deployment_id)
        self._heard.add(deployment_id)
        self._wake_polls()

    def woke(self, deployment_id: str) -> None:
        """Its sidecar was welcomed (or it was deleted): it is not asleep."""
        self._asleep.discard(deployment_id)
        if deployment_id in self._found:
            self._found.remove(deployment_id)

    def close(self) -> None:
        """The hub is stopping: every poll answers now, and any later one at
        once, with no names (starting a sidecar for a hub on its way out
        would be wasted: it joins the next)."""
        self._closed = True
        self._wake_polls()

    async def wakes(self, wait: float) -> list[str]:
        """The asleep deployments that have work, longest asleep first: at
        once when there are any, else as soon as there are, within ``wait``
        seconds (at most :data:`MAX_WAIT`); empty when none came."""
        return (await self.wakes_after(wait, None))[0]

    async def wakes_after(self, wait: float, cursor: str | None) -> tuple[list[str], str]:
        """As :meth:`wakes`, and the answer's cursor; with the ``cursor`` of an
        earlier answer of this hub, it answers once there is news since
        that answer (a poke, or a name the first read had not), else when
        ``wait`` ran out, with what it names then."""
        deadline = anyio.current_time() + min(max(wait, 0.0), MAX_WAIT)
        since = self._generation_of(cursor)
        first: frozenset[str] | None = None
        while True:
            # Taken before the read: a poke during the read is not lost.
            poked, generation = self._poked, self._generation
            if self._closed:
                return [], f"{self._boot}.{generation}"
            found = await self._look()
            left = deadline - anyio.current_time()
            news = since != generation or (first is not None and not first.issuperset(found))
            if (found and news) or left <= 0:
                return found, f"{self._boot}.{generation}"
            if first is None:
                first = frozenset(found)
            with anyio.move_on_after(min(left, self._reread)):
                await poked.wait()

    async def _look(self) -> list[str]:
        """The asleep deployments with work: the whole list when it is
        ``reread`` seconds old, else the last one with what was heard of
        since read again."""
        now = anyio.current_time()
        whole = self._read_at is None or now - self._read_at >= self._reread
        if not whole and not self._heard:
            return list(self._found)
        # Whatever is heard of during the read is read again next time; a
        # read that failed leaves it to be heard again.
        heard, self._heard = self._heard, set()
        try:
            if whole:
                self._found = await self._store.read(deployments_to_wake)
                self._read_at = now
            else:
                again = await self._store.read(partial(deployments_to_wake, among=heard))
                self._found = [dep for dep in self._found if dep not in heard] + again
        except BaseException:
            self._heard |= heard
            raise
        return list(self._found)

    def _generation_of(self, cursor: str | None) -> int | None:
        """The pokes a cursor of this hub's counted; None for any other."""
        boot, _, count = (cursor or "").partition(".")
        if boot != self._boot or not (count.isascii() and count.isdigit()):
            return None
        return int(count)

    def _wake_polls(self) -> None:
        self._generation += 1
        self._poked.set()
        self._poked = anyio.Event()
