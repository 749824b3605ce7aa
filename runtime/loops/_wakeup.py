"""Signals between tasks that fire again and again.

An ``anyio.Event`` fires once and stays set, so a loop that sleeps until
"something happened" would have to swap in a fresh event after every firing,
at exactly the right moment. These three name the patterns instead:

- :class:`Wakeup`: "look again" for one sleeping loop. Any number of ``set``
  calls before the loop looks coalesce into one wakeup, and ``wait``
  consumes it. A loop that calls ``clear`` before it looks (reads the queue,
  the table) misses nothing set after that point.
- :class:`Flag`: a condition that comes and goes (connected, idle); ``wait``
  returns while it holds, for every waiter.
- :class:`Broadcast`: "it changed", to every task waiting right now; waiters
  re-check their own condition in a loop.

All three are cheap to signal from sync code (callbacks, ``on_*`` hooks).
"""

from __future__ import annotations

import asyncio

import anyio


class _Resettable:
    """An ``asyncio.Event`` cleared in place (the runtime runs on anyio's
    asyncio backend): a fresh ``anyio.Event`` for every firing cost a lone
    mail several backend lookups in the hub alone."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    async def _wait(self, timeout: float | None) -> bool:
        if self._event.is_set():
            # As ``anyio.Event.wait``: a wait that need not block still
            # yields, so a loop woken again and again lets the others in.
            # asyncio's own, which anyio's checkpoint is on this backend,
            # without the backend's lookup (a lone mail passes a few).
            await asyncio.sleep(0)
            return True
        if timeout is None:
            # No cancel scope to enter and leave: most waits have no timeout,
            # and a lone mail passes several.
            await self._event.wait()
            return True
        with anyio.move_on_after(timeout):
            await self._event.wait()
            return True
        return False


class Wakeup(_Resettable):
    """A coalescing wakeup for one waiting loop: ``set`` from anywhere, ``wait`` consumes.

    ``clear`` drops a pending wakeup: the caller is about to look for itself.
    """

    __slots__ = ()

    async def wait(self, timeout: float | None = None) -> bool:
        """Until set (at once if set since the last wait); False if ``timeout`` passed first."""
        woken = await self._wait(timeout)
        if woken:
            self.clear()
        return woken


class Flag(_Resettable):
    """A level: ``wait`` returns while it is set, and blocks again after ``clear``."""

    __slots__ = ()

    def __init__(self, value: bool = False) -> None:
        super().__init__()
        if value:
            self.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Until set; False if ``timeout`` passed first."""
        return await self._wait(timeout)


class Broadcast:
    """Wakes every task waiting at the moment of ``notify``; later waiters wait for the next."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait(self) -> None:
        await self._event.wait()
