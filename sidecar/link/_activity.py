"""Activity: what keeps a sidecar awake (work in progress, the time of the
last bit of it) and the door its deliveries come through, which the sleeper
closes before it asks the hub to sleep (``sidecar/_sleep.py``).

Nothing here wakes anybody: marking work costs a counter and a clock read,
so a busy sidecar pays nothing for an idle clock it may never use. The
sleeper reads :attr:`Activity.last` when its own deadline comes, and moves
the deadline instead of waking on every frame. Only opening the door wakes
someone: the deliveries held at it while it was closed.
"""

from __future__ import annotations

import anyio

from runtime import Flag


class Activity:
    """Work in progress, counted; the end of any work, timed; and whether
    deliveries are taken."""

    __slots__ = ("_busy", "_door", "_working", "last")

    def __init__(self) -> None:
        self._working = 0
        self._busy = _Busy(self)
        self.last = 0.0
        """When work last ended, on the loop's clock (0: none yet; the
        sleeper counts its idle time from its own start at the earliest)."""
        self._door = Flag(True)

    @property
    def taking(self) -> bool:
        """Deliveries (mail frames, LoadVersion) are taken; False while the
        sidecar asks to sleep: a mail frame that comes then waits at the door
        (:meth:`opened`), never stored before it opens: refused, the sidecar
        stores and answers it within the hub's timeout; granted, the process
        stops and the hub delivers it again to the next one. A LoadVersion
        is left unanswered (the hub asks again)."""
        return self._door.is_set()

    @taking.setter
    def taking(self, value: bool) -> None:
        if value:
            self._door.set()
        else:
            self._door.clear()

    async def opened(self) -> None:
        """Until deliveries are taken again (at once if they are)."""
        await self._door.wait()

    @property
    def working(self) -> bool:
        """Some work is in progress (a request to the hub, a batch of frames,
        a version's load)."""
        return self._working > 0

    def poke(self) -> None:
        """Something happened: the idle time starts again from now."""
        self.last = anyio.current_time()

    def busy(self) -> _Busy:
        """Work in progress for the length of the block; its end is activity.
        A context manager of its own, not a generator's: a lone mail passes
        three."""
        return self._busy


class _Busy:
    __slots__ = ("_activity",)

    def __init__(self, activity: Activity) -> None:
        self._activity = activity

    def __enter__(self) -> None:
        self._activity._working += 1

    def __exit__(self, *exc: object) -> None:
        activity = self._activity
        activity._working -= 1
        activity.last = anyio.current_time()
