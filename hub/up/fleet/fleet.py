"""The sidecars of ``mailrun up``: one per live deployment, none for an asleep
one until the hub names it, and at most ``max_awake`` processes at once.

Starts beyond that limit wait in a first-come queue; while any waits, as many
running sidecars get SIGUSR1 ("sleep now if you are idle") as starts wait,
beyond those asked in the last second that have not exited yet, the least
recently asked first: a storm of wakes drains through the slots, and a lone
wake at the limit puts one idle sidecar to sleep, not all of them (each put
to sleep for nothing pays a boot when its own mail comes). A sidecar that exits
``SidecarExit.ASLEEP`` frees its slot and is remembered as asleep: it is not
restarted until ``wake`` names it or a listing asked for after it fell asleep
shows it awake (another process of the deployment was welcomed). A sidecar
that crashed frees its slot while it waits out its restart's backoff, then
queues for one again like any start: a crash loop never holds a slot that a
deployment waiting to wake could use.

A start has a bound (``StartBound``, bound.py; ``mailrun up --sidecar-join-timeout``):
a sidecar the hub has not welcomed within it is killed and started again,
through its slot like a crash, with a jittered backoff of its own.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Mapping

import anyio
import anyio.abc

from runtime import SidecarExit
from runtime.wire import DeploymentStatus, anchor_is_live

from ..processes import Child

NUDGE_EVERY = 1.0  # seconds a SIGUSR1 is awaited (the sidecar busy) before another is sent
_NUDGE_TICK = 0.25
# Listed so, a deployment up remembers asleep is not taken for awake: a paused
# one is shown paused whether or not its sidecar sleeps.
_NOT_AWAKE = frozenset({DeploymentStatus.ASLEEP.value, DeploymentStatus.PAUSED.value})

MakeChild = Callable[[str], Child | None]
"""The (not yet started) sidecar of a deployment; None when this host has no
restore record for it (its sidecar runs elsewhere, or never ran)."""


class Fleet:
    """Which deployments have a sidecar process of ``up``'s, and which wait for one.

    ``run`` owns the sidecars' tasks and the nudges; the supervisor feeds it
    the hub's listing (``sync``) and the hub's wake list (``wake``)."""

    def __init__(
        self,
        make_child: MakeChild,
        *,
        sleeps: bool,
        max_awake: int | None,
        say: Callable[[str], None],
        nudge_every: float = NUDGE_EVERY,
    ) -> None:
        self._make = make_child
        self._nudge_every = nudge_every
        self.sleeps = sleeps
        self.max_awake = max_awake if sleeps else None
        self._say = say
        self.children: dict[str, Child] = {}
        """Started and not ended, a process of it running, starting or
        stopping: a slot each."""
        self.resting: dict[str, Child] = {}
        """Started and not ended, crashed: waiting out the restart's backoff,
        or waiting for a slot again; no slot."""
        self.waiting: dict[str, Child] = {}  # first in, first started (a resting one: resumed)
        self._turns: dict[str, anyio.Event] = {}  # set when a waiting resting one gets its slot
        self.asleep: dict[str, float] = {}  # deployment -> when it fell asleep
        self.ended: dict[str, int] = {}  # deleted or owned elsewhere: never started again
        self.unsettled: set[str] = set()
        """Live and wanted at the last sync, not started: no restore record
        here (yet, or ever: another host's). A sync of changes lists them
        again, so that a record that comes is found."""
        self.most_awake = 0
        self._nudged: dict[str, float] = {}
        self._stopping: set[str] = set()
        self._queued = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Own the sidecars' tasks until cancelled; ``stop_all`` ends the sidecars."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._nudge_loop)
            task_status.started()

    def sync(self, listed: Mapping[str, str], asked_at: float, *, whole: bool = True) -> None:
        """Apply the hub's listing (deployment -> shown status), asked for at
        ``asked_at`` (``anyio.current_time()``). ``whole``: it lists every
        deployment, and one not in it is gone; else it lists what changed
        (with :attr:`unsettled`), and the others stay as they are."""
        live = {dep for dep, status in listed.items() if anchor_is_live(status)}
        unsettled: set[str] = set()
        for dep in sorted(live):
            status = listed[dep]
            fell_asleep = self.asleep.get(dep)
            if fell_asleep is not None:
                if asked_at < fell_asleep or status in _NOT_AWAKE:
                    continue
            elif self.sleeps and status == DeploymentStatus.ASLEEP:
                continue
            if not self._want(dep) and not self.has(dep) and dep not in self.ended:
                unsettled.add(dep)
        self.unsettled = unsettled
        if whole:
            gone = (self.children.keys() | self.resting.keys() | self.asleep.keys()) - live
            gone |= (self.waiting.keys() | self.ended.keys()) - live
        else:
            gone = listed.keys() - live
        for dep in sorted(gone & (self.children.keys() | self.resting.keys())):
            self._stop(dep)
        for dep in gone & self.waiting.keys() - self.resting.keys():
            del self.waiting[dep]  # a resting one leaves the queue as its task ends
        for held in (self.asleep, self.ended):
            for dep in gone & held.keys():
                del held[dep]

    def wake(self, dep: str) -> bool:
        """The hub has work for ``dep``: start its sidecar (or queue it) unless
        it has one; whether this did start or queue it."""
        return self._want(dep)

    @property
    def running(self) -> int:
        """Sidecar processes of ours that exist now."""
        return sum(1 for child in self.children.values() if child.pid is not None)

    def has(self, dep: str) -> bool:
        """Whether ``dep``'s sidecar is started, or queued for a slot."""
        return dep in self.children or dep in self.resting or dep in self.waiting

    def joining(self) -> list[tuple[str, Child]]:
        """The sidecars whose process runs, not yet seen welcomed, and not
        being stopped or restarted."""
        return [
            (dep, child)
            for dep, child in self.children.items()
            if child.joining and not child.restarting and dep not in self._stopping
        ]

    def started(self) -> set[str]:
        """The deployments whose sidecar ``run`` keeps (with a slot or not)."""
        return self.children.keys() | self.resting.keys()

    async def stop_all(self) -> None:
        for dep in self.waiting.keys() - self.resting.keys():
            del self.waiting[dep]
        async with anyio.create_task_group() as tg:
            for child in [*self.children.values(), *self.resting.values()]:
                tg.start_soon(child.stop)

    def _want(self, dep: str) -> bool:
        if self.has(dep) or dep in self.ended:
            return False
        child = self._make(dep)
        if child is None:
            return False
        self.asleep.pop(dep, None)
        if self._room():
            self._start(dep, child)
        else:
            self.waiting[dep] = child
            self._queued.set()
        return True

    def _start(self, dep: str, child: Child) -> None:
        assert self._tg is not None, "Fleet.run first"
        self._hold(dep, child)
        self._tg.start_soon(self._run, dep, child)

    def _hold(self, dep: str, child: Child) -> None:
        self.children[dep] = child
        self.most_awake = max(self.most_awake, len(self.children))

    def _stop(self, dep: str) -> None:
        assert self._tg is not None, "Fleet.run first"
        # It keeps its slot until it has exited: a start must not outnumber it.
        if dep not in self._stopping:
            self._stopping.add(dep)
            child = self.children.get(dep) or self.resting[dep]
            self._tg.start_soon(child.stop)

    async def _run(self, dep: str, child: Child) -> None:
        try:
            await child.run(_Place(self, dep, child))
        finally:
            for held in (self.children, self.resting, self.waiting):
                if held.get(dep) is child:
                    del held[dep]
            self._turns.pop(dep, None)
            self._nudged.pop(dep, None)
            self._stopping.discard(dep)
            self._fill()
        code = child.final_code
        if code == SidecarExit.ASLEEP:
            self.asleep[dep] = anyio.current_time()
        elif code is not None:
            # Not started again by this supervisor: a deployment that moved
            # away (or was deleted) has its sidecar elsewhere (or none).
            self.ended[dep] = code
            why = "was deleted" if code == SidecarExit.DELETED else "is owned elsewhere"
            self._say(f"mailrun up: {child.name} stopped: its deployment {why}")

    def _rest(self, dep: str, child: Child) -> None:
        """``child`` crashed: its slot goes to the first start waiting."""
        if self.children.get(dep) is child:
            del self.children[dep]
            self.resting[dep] = child
            self._nudged.pop(dep, None)
            self._fill()

    async def _resume(self, dep: str, child: Child) -> None:
        """``child``'s backoff is over: return once it holds a slot again,
        after the starts that queued before it."""
        if self.resting.get(dep) is not child:
            return  # not ours to count (a test's Child): let it be
        if not self.waiting and self._room():
            del self.resting[dep]
            self._hold(dep, child)
            return
        self._turns[dep] = turn = anyio.Event()
        self.waiting[dep] = child
        self._queued.set()
        await turn.wait()

    def _room(self) -> bool:
        """A slot is free."""
        return self.max_awake is None or len(self.children) < self.max_awake

    def _fill(self) -> None:
        while self.waiting and self._room():
            dep = next(iter(self.waiting))
            child = self.waiting.pop(dep)
            turn = self._turns.pop(dep, None)
            if turn is None:
                self._start(dep, child)
            else:
                del self.resting[dep]
                self._hold(dep, child)
                turn.set()

    async def _nudge_loop(self) -> None:
        while True:
            await self._queued.wait()
            while self.waiting:
                self._nudge()
                await anyio.sleep(_NUDGE_TICK)
            self._queued = anyio.Event()

    def _nudge(self) -> None:
        now = anyio.current_time()
        # A sidecar asked and still running is idle-checking or busy: it is
        # counted as on its way out until ``nudge_every`` has passed.
        awaited = sum(1 for at in self._nudged.values() if now - at < self._nudge_every)
        wanted = len(self.waiting) - awaited
        if wanted <= 0:
            return
        never = -self._nudge_every
        candidates = [
            (dep, child)
            for dep, child in self.children.items()
            if dep not in self._stopping and now - self._nudged.get(dep, never) >= self._nudge_every
        ]
        candidates.sort(key=lambda item: self._nudged.get(item[0], never))  # stable: oldest first
        for dep, child in candidates:
            if wanted == 0:
                return
            # A process still booting would die of the signal's default
            # action: only one that has its handler in place gets it.
            if child.catches(signal.SIGUSR1):
                self._nudged[dep] = now
                wanted -= 1
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGUSR1)


class _Place:
    """A sidecar's slot in the fleet (``children.Slot``)."""

    __slots__ = ("_child", "_dep", "_fleet")

    def __init__(self, fleet: Fleet, dep: str, child: Child) -> None:
        self._fleet, self._dep, self._child = fleet, dep, child

    def free(self) -> None:
        self._fleet._rest(self._dep, self._child)

    async def take(self) -> None:
        await self._fleet._resume(self._dep, self._child)
