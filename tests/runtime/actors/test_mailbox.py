"""The actor kernel's bounded mailbox: order, backpressure, closing, and
cancellation of a waiting sender or receiver that loses nothing."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from runtime.actors._mailbox import Mailbox

pytestmark = pytest.mark.anyio


async def test_messages_come_out_in_order_and_a_full_mailbox_makes_senders_wait() -> None:
    box: Mailbox[int] = Mailbox(2)
    box.send_nowait(1)
    await box.send(2)
    with pytest.raises(anyio.WouldBlock):
        box.send_nowait(3)
    sent = anyio.Event()

    async def third() -> None:
        await box.send(3)
        sent.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(third)
        await anyio.wait_all_tasks_blocked()
        assert not sent.is_set()  # waiting for room
        assert await box.receive() == 1
        await sent.wait()
    assert [box.receive_nowait(), box.receive_nowait()] == [2, 3]
    with pytest.raises(anyio.WouldBlock):
        box.receive_nowait()


async def test_closing_drains_what_is_queued_and_refuses_what_comes() -> None:
    box: Mailbox[str] = Mailbox(1)
    box.send_nowait("kept")
    refused = anyio.Event()

    async def late() -> None:
        with pytest.raises(anyio.ClosedResourceError):
            await box.send("late")  # waits for room, then the mailbox closes
        refused.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(late)
        await anyio.wait_all_tasks_blocked()
        box.close()
        await refused.wait()
    assert await box.receive() == "kept"
    with pytest.raises(anyio.EndOfStream):
        await box.receive()
    with pytest.raises(anyio.ClosedResourceError):
        box.send_nowait("after")


async def test_a_cancelled_wait_takes_nothing_and_adds_nothing() -> None:
    box: Mailbox[int] = Mailbox(1)
    with anyio.move_on_after(0.05) as scope:
        await box.receive()  # nothing there: waits, then is cancelled
    assert scope.cancelled_caught
    box.send_nowait(1)
    with anyio.move_on_after(0.05) as scope:
        await box.send(2)  # full: waits, then is cancelled
    assert scope.cancelled_caught
    assert box.receive_nowait() == 1
    with pytest.raises(anyio.WouldBlock):
        box.receive_nowait()


async def test_a_receiver_waiting_gets_the_next_message() -> None:
    box: Mailbox[int] = Mailbox(4)
    got: list[int] = []

    async def receiver() -> None:
        got.append(await box.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        await anyio.wait_all_tasks_blocked()
        await box.send(7)
    assert got == [7]


async def test_waiting_senders_get_room_in_turn_and_a_cancelled_one_leaves_the_queue() -> None:
    box: Mailbox[str] = Mailbox(1)
    box.send_nowait("first")
    gone = anyio.CancelScope()

    async def cancelled() -> None:
        with gone:
            await box.send("never")

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancelled)  # first in the queue of senders
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(box.send, "b")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(box.send, "c")
        await anyio.wait_all_tasks_blocked()
        gone.cancel()
        got = [await box.receive() for _ in range(3)]
    assert got == ["first", "b", "c"]


async def test_a_receiver_woken_then_cancelled_passes_the_message_on() -> None:
    # A cancel scope lets a task already woken run on (the cancellation
    # lands at its next wait); asyncio's own cancel (asyncio.timeout,
    # wait_for) does not: the woken receiver leaves without the message.
    box: Mailbox[int] = Mailbox(4)
    first: list[asyncio.Task[object]] = []
    got: list[int] = []
    left: list[str] = []

    async def cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        first.append(task)
        try:
            got.append(await box.receive())
        except asyncio.CancelledError:
            left.append("cancelled")
            task.uncancel()

    async def second() -> None:
        got.append(await box.receive())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancelled)  # first in the queue of receivers
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            box.send_nowait(7)  # wakes the first receiver...
            first[0].cancel()  # ...which is cancelled before it runs
    assert left == ["cancelled"]
    assert got == [7]


async def test_closing_wakes_every_waiting_receiver() -> None:
    box: Mailbox[int] = Mailbox(1)
    ended: list[str] = []

    async def receiver(name: str) -> None:
        with pytest.raises(anyio.EndOfStream):
            await box.receive()
        ended.append(name)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(receiver, "a")
            tg.start_soon(receiver, "b")
            await anyio.wait_all_tasks_blocked()
            box.close()
    assert sorted(ended) == ["a", "b"]
