"""Deadlines on one shared timer (runtime/actors/_deadlines.py): what fails, when,
and what is left alone."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from runtime.actors._deadlines import Deadlines

pytestmark = pytest.mark.anyio


class Expired(Exception):
    pass


def _deadlines() -> Deadlines:
    return Deadlines(lambda timeout: Expired(timeout))


async def _failure(future: asyncio.Future[object]) -> BaseException:
    with anyio.fail_after(5), pytest.raises(Expired) as info:
        await future
    return info.value


async def test_a_shorter_deadline_added_later_fails_first() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _deadlines()
    slow: asyncio.Future[object] = loop.create_future()
    quick: asyncio.Future[object] = loop.create_future()
    deadlines.add(loop, slow, 60)
    deadlines.add(loop, quick, 0.05)
    assert (await _failure(quick)).args == (0.05,)
    assert not slow.done()  # its own deadline is a minute away
    slow.set_result("answered")
    deadlines.discard(slow)
    assert len(deadlines) == 0


async def test_the_timer_goes_on_for_deadlines_after_the_first() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _deadlines()
    first: asyncio.Future[object] = loop.create_future()
    second: asyncio.Future[object] = loop.create_future()
    deadlines.add(loop, first, 0.02)
    deadlines.add(loop, second, 0.2)
    assert (await _failure(first)).args == (0.02,)
    assert (await _failure(second)).args == (0.2,)
    assert len(deadlines) == 0


async def test_futures_answered_or_cancelled_in_time_are_left_alone() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _deadlines()
    answered: asyncio.Future[object] = loop.create_future()
    cancelled: asyncio.Future[object] = loop.create_future()
    late: asyncio.Future[object] = loop.create_future()
    deadlines.add(loop, answered, 0.02)
    deadlines.add(loop, cancelled, 0.02)
    deadlines.add(loop, late, 0.05)
    answered.set_result(1)
    cancelled.cancel()  # its waiter left
    await _failure(late)
    assert answered.result() == 1
    assert cancelled.cancelled()
    assert len(deadlines) == 0


async def test_futures_answered_in_order_are_not_kept() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _deadlines()
    for n in range(1000):
        future: asyncio.Future[object] = loop.create_future()
        deadlines.add(loop, future, 60)
        future.set_result(n)
        deadlines.discard(future)
    assert len(deadlines) == 0
    # Out of order: the one answered first leaves with the next add, once
    # those before it are done too.
    older: asyncio.Future[object] = loop.create_future()
    newer: asyncio.Future[object] = loop.create_future()
    deadlines.add(loop, older, 60)
    deadlines.add(loop, newer, 60)
    newer.set_result(None)
    deadlines.discard(newer)
    assert len(deadlines) == 2
    older.set_result(None)
    deadlines.discard(older)
    nxt: asyncio.Future[object] = loop.create_future()
    deadlines.add(loop, nxt, 60)
    assert len(deadlines) == 1
    nxt.cancel()
