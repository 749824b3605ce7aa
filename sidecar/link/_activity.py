"""Activity: what keeps a sidecar awake (work in progress, the time of the
last bit of it) and the door its deliveries come through, which the sleeper
closes before it asks the hub to sleep (``sidecar/_sleep.py``).

Nothing here wakes anybody: marking work costs a counter and a clock read,
so a busy sidecar pays nothing for an idle clock it may never use. The
sleeper reads :attr:`Activity.last` when its own deadline comes, and moves
the deadline instead of waking on every frame.
"""

from __future__ import annotations

import anyio


class Activity:
    """Work in progress, counted; the end of any work, timed; and whether
    deliveries are taken."""

    __slots__ = ("_busy", "_working", "last", "taking")

    def __init__(self) -> None:
        self._working = 0
        self._busy = _Busy(self)
        self.last = 0.0
        """When work last ended, on the loop's clock (0: none yet; the
        sleeper counts its idle time from its own start at the earliest)."""
        self.taking = True
        """Deliveries (mail frames, LoadVersion) are taken; False while the
        sidecar asks to sleep: one that comes then is left unanswered, never
        stored, and the hub delivers it again to this process or the next."""

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
