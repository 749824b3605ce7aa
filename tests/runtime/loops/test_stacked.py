"""StackedContext: what a subclass enters is left in reverse, with the block's
exception; an entry that fails halfway leaves what it had entered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest

from runtime.loops import StackedContext

pytestmark = pytest.mark.anyio


class Holder(StackedContext):
    def __init__(self, fail_after: int | None = None) -> None:
        self.log: list[str] = []
        self.fail_after = fail_after

    @asynccontextmanager
    async def part(self, name: str) -> AsyncIterator[None]:
        self.log.append(f"enter {name}")
        try:
            yield
        except BaseException as exc:
            self.log.append(f"leave {name} with {type(exc).__name__}")
            raise
        self.log.append(f"leave {name}")

    async def _open(self, stack: AsyncExitStack) -> None:
        for n, name in enumerate(("a", "b")):
            if n == self.fail_after:
                raise RuntimeError("cannot open")
            await stack.enter_async_context(self.part(name))


async def test_leaving_unwinds_in_reverse() -> None:
    holder = Holder()
    async with holder as entered:
        assert entered is holder
        assert holder.log == ["enter a", "enter b"]
    assert holder.log[2:] == ["leave b", "leave a"]
    async with holder:  # entered again: a stack of its own
        pass
    assert holder.log[4:] == ["enter a", "enter b", "leave b", "leave a"]


async def test_the_blocks_exception_reaches_what_was_entered() -> None:
    holder = Holder()
    with pytest.raises(KeyError):
        async with holder:
            raise KeyError("x")
    assert holder.log[2:] == ["leave b with KeyError", "leave a with KeyError"]


async def test_an_entry_that_fails_leaves_what_it_had_entered() -> None:
    holder = Holder(fail_after=1)
    with pytest.raises(RuntimeError, match="cannot open"):
        async with holder:
            pytest.fail("entered")
    assert holder.log == ["enter a", "leave a with RuntimeError"]
