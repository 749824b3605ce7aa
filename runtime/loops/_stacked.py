"""StackedContext: an object that is its own ``async with``, over an exit
stack it owns.

A supervisor, a scheduler, a proxy: each enters task groups and contexts
when it is entered and must leave them, in reverse, when it is left, with
the exception that ended the block. Each subclass says what it enters
(:meth:`StackedContext._open`, onto the stack it is given); entering,
unwinding a half-done entry, and leaving are written here once.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import TracebackType
from typing import Self


class StackedContext:
    """Base of an async context manager whose entering fills an exit stack."""

    _entered: AsyncExitStack | None = None

    async def _open(self, stack: AsyncExitStack) -> None:
        """Enter what this object holds while it is entered, onto ``stack``
        (task groups, contexts, callbacks: they are left in reverse)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            # Raising here unwinds what was entered so far, and nothing is kept.
            await self._open(stack)
            self._entered = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        entered, self._entered = self._entered, None
        assert entered is not None, "left without being entered"
        return await entered.__aexit__(exc_type, exc, tb)
