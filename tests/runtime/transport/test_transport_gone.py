"""A client's end cancels the requests waiting on it, and those begun after
it; a request's deadline rides on the same scope."""

from __future__ import annotations

import anyio
import pytest

from runtime.transport._gone import Gone

pytestmark = pytest.mark.anyio


async def test_the_end_cancels_every_request_waiting_and_only_those() -> None:
    gone = Gone()
    cut: list[bool] = []
    waiting = anyio.Event()

    async def ask() -> None:
        with gone.asking() as scope:
            waiting.set()
            await anyio.sleep_forever()
        cut.append(scope.cancelled_caught)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            tg.start_soon(ask)
            await waiting.wait()
            await anyio.wait_all_tasks_blocked()
            with gone.asking() as done:
                pass  # a request answered before the end: left alone
            gone.set()
    assert cut == [True, True]
    assert not done.cancelled_caught
    assert gone.is_set()


async def test_a_request_begun_after_the_end_is_cancelled_before_it_waits() -> None:
    gone = Gone()
    gone.set()
    with anyio.fail_after(5):
        await gone.wait()
        with gone.asking() as scope:
            await anyio.sleep_forever()
    assert scope.cancelled_caught


async def test_the_deadline_rides_on_the_same_scope() -> None:
    gone = Gone()
    with anyio.fail_after(5):
        with gone.asking(anyio.current_time() + 0.05) as scope:
            await anyio.sleep_forever()
    # Cut short by the deadline, not by the end: the caller tells them apart.
    assert scope.cancelled_caught
    assert not gone.is_set()
