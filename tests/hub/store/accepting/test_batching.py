"""The one batching loop under the hub's group commits: a lone request, the
loop idle, commits in its caller's task; requests waiting at the same moment
go to one commit, up to ``max_batch`` by weight, in the order they came,
after any commit running; the commit's answer reaches each caller, its
error raised; callers still waiting when the loop stops, and later ones,
are told the hub is shutting down."""

from __future__ import annotations

import anyio
import pytest

from hub._errors import HubShuttingDown
from hub.store import Batches, Pending
from tests.support import wait_for

pytestmark = pytest.mark.anyio


class Job(Pending[str]):
    __slots__ = ("name",)

    def __init__(self, name: str, weight: int = 1) -> None:
        super().__init__(weight)
        self.name = name


class Recorder:
    """A commit that answers each request with its name, and keeps each batch's names."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.log: list[str] = []  # "+name" as a commit begins, "-name" as it ends
        self.tasks: dict[str, int] = {}  # the task each job's commit ran in
        self.hold = anyio.Event()
        self.hold.set()
        self.began = anyio.Event()

    async def commit(self, batch: list[Job]) -> None:
        self.batches.append([job.name for job in batch])
        self.log.append("+" + batch[0].name)
        for job in batch:
            self.tasks[job.name] = anyio.get_current_task().id
        self.began.set()
        await self.hold.wait()
        self.log.append("-" + batch[0].name)
        for job in batch:
            if job.name.startswith("bad"):
                job.finish(None, ValueError(job.name))
            else:
                job.finish(job.name.upper())


async def test_a_lone_request_commits_in_its_callers_task() -> None:
    recorder = Recorder()
    batches: Batches[Job] = Batches(recorder.commit, max_batch=4, queue_size=16)
    async with anyio.create_task_group() as tg:
        await tg.start(batches.run)
        for name in ("one", "two"):  # one after the other: each finds the loop idle
            job = Job(name)
            await batches.ask(job)
            assert job.result == name.upper()
            assert recorder.tasks[name] == anyio.get_current_task().id
        tg.cancel_scope.cancel()
    assert recorder.batches == [["one"], ["two"]]


async def test_waiting_requests_share_a_batch_up_to_its_weight() -> None:
    recorder = Recorder()
    batches: Batches[Job] = Batches(recorder.commit, max_batch=4, queue_size=16)
    answers: dict[str, object] = {}

    async def ask(job: Job) -> None:
        try:
            await batches.ask(job)
            answers[job.name] = job.result
        except ValueError as exc:
            answers[job.name] = exc

    jobs = [Job("a", 3), Job("bad", 1), Job("b", 2), Job("c"), Job("d", 5), Job("e")]
    async with anyio.create_task_group() as tg:
        tg.start_soon(batches.run)
        async with anyio.create_task_group() as callers:
            for job in jobs:  # all ready at once: the first one takes the others
                callers.start_soon(ask, job)
        tg.cancel_scope.cancel()
    # Taken in order; a batch closes once its weight reaches 4 (a request
    # heavier than what is left still goes in whole, as the first or last).
    assert recorder.batches == [["a", "bad"], ["b", "c", "d"], ["e"]]
    assert answers["a"] == "A" and answers["e"] == "E"
    assert isinstance(answers["bad"], ValueError)


async def test_requests_arriving_during_a_lone_commit_are_committed_after_it() -> None:
    recorder = Recorder()
    recorder.hold = anyio.Event()
    batches: Batches[Job] = Batches(recorder.commit, max_batch=8, queue_size=16)
    answers: dict[str, object] = {}

    asked: list[str] = []

    async def ask(job: Job) -> None:
        asked.append(job.name)  # queued by the time another task looks
        await batches.ask(job)
        answers[job.name] = job.result

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(batches.run)
            async with anyio.create_task_group() as callers:
                callers.start_soon(ask, Job("lone"))
                await recorder.began.wait()
                callers.start_soon(ask, Job("b"))
                callers.start_soon(ask, Job("c"))
                await wait_for(lambda: len(asked) == 3, timeout=5)
                assert recorder.batches == [["lone"]]  # the loop waits for it to end
                recorder.hold.set()
            tg.cancel_scope.cancel()
    assert recorder.log == ["+lone", "-lone", "+b", "-b"]
    assert recorder.batches == [["lone"], ["b", "c"]]
    assert answers == {"lone": "LONE", "b": "B", "c": "C"}
    assert recorder.tasks["lone"] != recorder.tasks["b"] == recorder.tasks["c"]


async def test_a_caller_cancelled_while_committing_others_commits_them_whole() -> None:
    recorder = Recorder()
    recorder.hold = anyio.Event()
    batches: Batches[Job] = Batches(recorder.commit, max_batch=8, queue_size=16)
    first, other = Job("first"), Job("other")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(batches.run)
            async with anyio.create_task_group() as callers, anyio.create_task_group() as caller:
                caller.start_soon(batches.ask, first)
                callers.start_soon(batches.ask, other)  # ready at the same moment
                await recorder.began.wait()
                assert recorder.batches == [["first", "other"]]
                caller.cancel_scope.cancel()
                recorder.hold.set()
            assert recorder.log == ["+first", "-first"]
            assert (first.result, other.result) == ("FIRST", "OTHER")
            tg.cancel_scope.cancel()


async def test_a_lone_caller_cancelled_in_its_commit_leaves_the_loop_free() -> None:
    recorder = Recorder()
    recorder.hold = anyio.Event()
    batches: Batches[Job] = Batches(recorder.commit, max_batch=8, queue_size=16)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(batches.run)
            async with anyio.create_task_group() as caller:
                caller.start_soon(batches.ask, Job("lone"))
                await recorder.began.wait()
                caller.cancel_scope.cancel()
            assert recorder.log == ["+lone"]  # its own commit, cut short with it
            recorder.hold.set()
            later = Job("later")
            await batches.ask(later)
            assert later.result == "LATER"
            assert recorder.tasks["later"] == anyio.get_current_task().id
            tg.cancel_scope.cancel()


async def test_callers_waiting_when_the_loop_stops_are_told_so() -> None:
    recorder = Recorder()
    recorder.hold = anyio.Event()
    batches: Batches[Job] = Batches(recorder.commit, max_batch=1, queue_size=16)
    refused: list[str] = []
    asked: list[str] = []
    lone = Job("lone")

    async def ask(job: Job) -> None:
        asked.append(job.name)
        try:
            await batches.ask(job)
        except HubShuttingDown:
            refused.append(job.name)

    # The callers outside the loop's group: its cancellation is not theirs.
    with anyio.fail_after(5):
        async with anyio.create_task_group() as callers:
            async with anyio.create_task_group() as tg:
                await tg.start(batches.run)
                callers.start_soon(ask, lone)  # commits in its own task, held
                await recorder.began.wait()
                for name in ("taken", "queued"):  # the loop takes one and waits
                    callers.start_soon(ask, Job(name))
                await wait_for(lambda: len(asked) == 3, timeout=5)
                tg.cancel_scope.cancel()
            await wait_for(lambda: len(refused) == 2, timeout=5)
            recorder.hold.set()  # the lone commit is its caller's: it ends, answered
    assert sorted(refused) == ["queued", "taken"]
    assert lone.result == "LONE"
    with pytest.raises(HubShuttingDown):
        await batches.ask(Job("late"))


async def test_a_full_mailbox_makes_callers_wait_and_loses_none() -> None:
    recorder = Recorder()
    recorder.hold = anyio.Event()
    batches: Batches[Job] = Batches(recorder.commit, max_batch=2, queue_size=2)
    answers: dict[str, object] = {}

    async def ask(job: Job) -> None:
        await batches.ask(job)
        answers[job.name] = job.result

    async with anyio.create_task_group() as tg:
        await tg.start(batches.run)
        async with anyio.create_task_group() as callers:
            for n in range(9):
                callers.start_soon(ask, Job(f"j{n}"))
            with anyio.fail_after(5):
                await recorder.began.wait()
            recorder.hold.set()
        tg.cancel_scope.cancel()
    assert answers == {f"j{n}": f"J{n}" for n in range(9)}
    assert all(len(batch) <= 2 for batch in recorder.batches)
    assert [name for batch in recorder.batches for name in batch] == [f"j{n}" for n in range(9)]
