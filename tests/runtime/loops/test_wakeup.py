"""Wakeup, Flag and Broadcast: what a waiting task sees."""

from __future__ import annotations

import anyio
import pytest

from runtime import Flag, Wakeup
from runtime.loops import Broadcast

pytestmark = pytest.mark.anyio


async def test_a_wakeup_set_before_the_wait_is_not_lost() -> None:
    wakeup = Wakeup()
    wakeup.set()
    with anyio.fail_after(1):
        assert await wakeup.wait() is True


async def test_a_burst_of_wakeups_wakes_the_waiter_once() -> None:
    wakeup = Wakeup()
    for _ in range(3):
        wakeup.set()
    assert await wakeup.wait(0.5) is True
    assert await wakeup.wait(0.05) is False


async def test_a_wakeup_from_another_task_ends_the_wait() -> None:
    wakeup = Wakeup()
    woken: list[bool] = []
    async with anyio.create_task_group() as tg:

        async def waiter() -> None:
            woken.append(await wakeup.wait())

        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert woken == []
        wakeup.set()
    assert woken == [True]


async def test_clear_drops_a_pending_wakeup_and_a_later_set_still_counts() -> None:
    wakeup = Wakeup()
    wakeup.set()
    wakeup.clear()
    assert await wakeup.wait(0.05) is False
    wakeup.set()
    assert await wakeup.wait(0.5) is True


async def test_a_wakeup_wait_times_out_without_a_set() -> None:
    start = anyio.current_time()
    assert await Wakeup().wait(0.05) is False
    assert anyio.current_time() - start >= 0.05


async def test_a_flag_holds_for_every_waiter_until_cleared() -> None:
    flag = Flag()
    assert not flag.is_set()
    results: list[bool] = []
    async with anyio.create_task_group() as tg:
        for _ in range(3):

            async def waiter() -> None:
                results.append(await flag.wait())

            tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert results == []
        flag.set()
    assert results == [True, True, True]
    assert flag.is_set()
    assert await flag.wait(0.5) is True  # a level: waiting does not consume it
    flag.clear()
    assert not flag.is_set()
    assert await flag.wait(0.05) is False


async def test_a_flag_may_start_set() -> None:
    flag = Flag(True)
    assert flag.is_set()
    assert await flag.wait(0.5) is True


async def test_a_flag_set_and_cleared_again_still_wakes_the_waiters_of_that_moment() -> None:
    flag = Flag()
    results: list[bool] = []
    async with anyio.create_task_group() as tg:

        async def waiter() -> None:
            results.append(await flag.wait(1.0))

        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        flag.set()
        flag.clear()
    assert results == [True]
    assert not flag.is_set()


async def test_a_broadcast_wakes_every_current_waiter() -> None:
    changed = Broadcast()
    woken: list[int] = []
    async with anyio.create_task_group() as tg:
        for n in range(3):

            async def waiter(n: int = n) -> None:
                await changed.wait()
                woken.append(n)

            tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        changed.notify()
    assert sorted(woken) == [0, 1, 2]


async def test_a_broadcast_is_not_remembered_for_later_waiters() -> None:
    changed = Broadcast()
    changed.notify()
    with anyio.move_on_after(0.05) as scope:
        await changed.wait()
    assert scope.cancelled_caught
