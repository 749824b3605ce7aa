"""unwrap_group / unwrapping_groups: a group of one is the exception it holds."""

from __future__ import annotations

import anyio
import pytest

from runtime import unwrap_group
from runtime.loops import unwrapping_groups


def test_unwrap_group_finds_the_lone_exception_through_nested_groups() -> None:
    error = ValueError("x")
    assert unwrap_group(error) is error
    assert unwrap_group(ExceptionGroup("one", [error])) is error
    assert unwrap_group(ExceptionGroup("outer", [ExceptionGroup("inner", [error])])) is error
    assert unwrap_group(BaseExceptionGroup("base", [KeyboardInterrupt()])).__class__ is (
        KeyboardInterrupt
    )


def test_unwrap_group_leaves_a_group_of_several_as_it_is() -> None:
    several = ExceptionGroup("two", [ValueError("a"), KeyError("b")])
    assert unwrap_group(several) is several
    assert unwrap_group(ExceptionGroup("outer", [several])) is several


@pytest.mark.anyio
async def test_a_failed_task_leaves_the_block_as_its_own_exception() -> None:
    async def fail() -> None:
        try:
            raise KeyError("cause")
        except KeyError as exc:
            raise ValueError("boom") from exc

    with pytest.raises(ValueError, match="boom") as info, unwrapping_groups():
        async with anyio.create_task_group() as outer, anyio.create_task_group() as inner:
            inner.start_soon(fail)
            outer.start_soon(anyio.sleep_forever)
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.__suppress_context__


@pytest.mark.anyio
async def test_several_failures_leave_the_block_as_the_same_group() -> None:
    async def fail(exc: Exception) -> None:
        raise exc

    with pytest.raises(ExceptionGroup) as info, unwrapping_groups():
        async with anyio.create_task_group() as tg:
            tg.start_soon(fail, ValueError("a"))
            tg.start_soon(fail, KeyError("b"))
    assert sorted(type(e).__name__ for e in info.value.exceptions) == ["KeyError", "ValueError"]


def test_other_exceptions_and_a_clean_exit_pass_through() -> None:
    with unwrapping_groups():
        pass
    with pytest.raises(ValueError), unwrapping_groups():
        raise ValueError("plain")


@pytest.mark.anyio
async def test_the_unwrapped_exception_keeps_its_own_context_not_the_group() -> None:
    async def fail() -> None:
        raise ValueError("alone")

    with pytest.raises(ValueError, match="alone") as info, unwrapping_groups():
        async with anyio.create_task_group() as tg:
            tg.start_soon(fail)
    assert info.value.__context__ is None
    assert not info.value.__suppress_context__
