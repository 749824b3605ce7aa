"""Workers: a job goes to a task that waits for one, a new task only when
none waits, at most ``keep`` wait; close ends the waiting ones and lets the
busy ones finish; a job's error is the group's; cancelling the group ends
them all."""

from __future__ import annotations

import anyio
import pytest

from runtime.loops import Workers

pytestmark = pytest.mark.anyio


async def test_jobs_one_after_another_run_in_one_task() -> None:
    ran: list[int] = []

    async def job(n: int) -> None:
        ran.append(anyio.get_current_task().id)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            workers = Workers(tg, keep=4)
            for n in range(5):
                workers.start_soon(job, n)
                await anyio.wait_all_tasks_blocked()
            workers.close()
    assert len(ran) == 5
    assert len(set(ran)) == 1


async def test_a_burst_leaves_at_most_keep_tasks_waiting() -> None:
    tasks: list[set[int]] = [set(), set()]

    async def job(burst: int, go: anyio.Event) -> None:
        tasks[burst].add(anyio.get_current_task().id)
        await go.wait()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            workers = Workers(tg, keep=2)
            for burst in (0, 1):
                go = anyio.Event()
                for _ in range(5):
                    workers.start_soon(job, burst, go)
                await anyio.wait_all_tasks_blocked()
                go.set()
                await anyio.wait_all_tasks_blocked()
            workers.close()
    assert len(tasks[0]) == 5 and len(tasks[1]) == 5
    # Two of the first burst's tasks waited, and took two of the second's jobs.
    assert len(tasks[0] & tasks[1]) == 2


async def test_close_ends_waiting_tasks_and_lets_busy_ones_finish() -> None:
    finished: list[str] = []

    async def job(name: str, go: anyio.Event) -> None:
        await go.wait()
        finished.append(name)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            workers = Workers(tg)
            done = anyio.Event()
            done.set()
            workers.start_soon(job, "quick", done)
            await anyio.wait_all_tasks_blocked()  # its task now waits for a job
            slow = anyio.Event()
            workers.start_soon(job, "slow", slow)
            workers.start_soon(job, "other", done)
            await anyio.wait_all_tasks_blocked()
            workers.close()  # the group ends once "slow" finishes
            slow.set()
    assert sorted(finished) == ["other", "quick", "slow"]
    with pytest.raises(RuntimeError):
        workers.start_soon(job, "late", done)


async def test_an_error_of_a_job_is_raised_in_the_group() -> None:
    async def job() -> None:
        raise LookupError("a job's bug")

    async def fine() -> None:
        pass

    with anyio.fail_after(5), pytest.raises(ExceptionGroup) as caught:
        async with anyio.create_task_group() as tg:
            workers = Workers(tg)
            workers.start_soon(fine)
            await anyio.wait_all_tasks_blocked()
            workers.start_soon(job)  # handed to the waiting task
    assert caught.group_contains(LookupError)


async def test_cancelling_the_group_ends_waiting_and_busy_tasks() -> None:
    cancelled: list[str] = []

    async def job(name: str) -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(name)
            raise

    async def fine() -> None:
        pass

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            workers = Workers(tg)
            workers.start_soon(fine)
            await anyio.wait_all_tasks_blocked()  # one task waits
            workers.start_soon(job, "busy")
            workers.start_soon(job, "spawned")
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
    assert sorted(cancelled) == ["busy", "spawned"]
