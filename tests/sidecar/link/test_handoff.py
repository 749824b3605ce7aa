"""The link's hand-off between two tasks: bounded, in order, taken whole,
and ended by close."""

from __future__ import annotations

import anyio
import pytest

from sidecar.link._handoff import Handoff

pytestmark = pytest.mark.anyio


async def test_the_taker_gets_everything_waiting_in_order_up_to_its_limit() -> None:
    handoff = Handoff[int](8)
    for n in range(5):
        await handoff.put(n)
    assert await handoff.take(3) == [0, 1, 2]
    assert await handoff.take(3) == [3, 4]


async def test_a_put_waits_for_room_and_a_take_for_an_item() -> None:
    handoff = Handoff[int](2)
    await handoff.put(1)
    await handoff.put(2)
    taken: list[list[int]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(handoff.put, 3)  # full: waits
        await anyio.wait_all_tasks_blocked()
        taken.append(await handoff.take(10))  # makes room
        taken.append(await handoff.take(10))  # the waiting put's item
        tg.start_soon(lambda: handoff.put(4))
        taken.append(await handoff.take(10))  # waits for it
    assert taken == [[1, 2], [3], [4]]


async def test_close_ends_the_taker_once_it_has_taken_the_rest() -> None:
    handoff = Handoff[str](4)
    await handoff.put("last")
    handoff.close()
    assert await handoff.take(4) == ["last"]
    assert await handoff.take(4) == []


async def test_a_take_waiting_on_an_empty_handoff_ends_at_close() -> None:
    handoff = Handoff[str](4)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            got: list[list[str]] = []

            async def take() -> None:
                got.append(await handoff.take(4))

            tg.start_soon(take)
            await anyio.wait_all_tasks_blocked()
            handoff.close()
    assert got == [[]]
