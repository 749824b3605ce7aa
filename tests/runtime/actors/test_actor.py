"""Unit tests of the actor kernel (runtime/actors/_actor.py)."""

from __future__ import annotations

import anyio
import pytest

from runtime import Backoff
from runtime.actors import Actor, ActorRef, RestartPolicy, Supervisor
from runtime.errors import ActorStopped, AskTimeout, MailboxFull

pytestmark = pytest.mark.anyio

FAST = RestartPolicy(max_restarts=3, window=60.0, backoff=Backoff(0.001, 0.01))


class Gate:
    """Holds an actor busy until released; ``entered`` tells when it is."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()

    def set(self) -> None:
        self.release.set()


class Recorder(Actor[object]):
    """Records what it sees into a shared log; crashes on request."""

    def __init__(self, log: list[object], starts: list[int]) -> None:
        self.log = log
        starts.append(len(starts) + 1)

    async def receive(self, message: object) -> object:
        if message == "boom":
            raise RuntimeError("boom")
        if isinstance(message, Gate):
            message.entered.set()
            await message.release.wait()
            return "released"
        self.log.append(message)
        return f"got {message}"


async def test_tell_and_ask_in_order() -> None:
    log: list[object] = []
    starts: list[int] = []
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder(log, starts), name="rec")
        for i in range(5):
            await ref.tell(i)
        assert await ref.ask("last", timeout=2) == "got last"
    assert log == [0, 1, 2, 3, 4, "last"]
    assert not ref.alive


async def test_ask_timeout_is_a_timeout_error() -> None:
    gate = Gate()
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder([], []), name="slow")
        with pytest.raises(AskTimeout) as info:
            await ref.ask(gate, timeout=0.05)
        assert isinstance(info.value, TimeoutError)
        gate.set()


async def test_crash_restarts_with_a_fresh_instance_and_keeps_the_mailbox() -> None:
    log: list[object] = []
    starts: list[int] = []
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder(log, starts), name="rec", policy=FAST)
        await ref.tell(1)
        await ref.tell("boom")
        await ref.tell(2)
        assert await ref.ask(3, timeout=2) == "got 3"
    assert log == [1, 2, 3]
    assert starts == [1, 2]


async def test_ask_receives_the_actors_exception() -> None:
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder([], []), name="rec", policy=FAST)
        with pytest.raises(RuntimeError, match="boom"):
            await ref.ask("boom", timeout=2)
        assert await ref.ask("after", timeout=2) == "got after"


async def test_gives_up_past_the_restart_budget() -> None:
    gave_up: list[tuple[str, str]] = []
    done = anyio.Event()

    async def on_give_up(name: str, exc: BaseException) -> None:
        gave_up.append((name, str(exc)))
        done.set()

    starts: list[int] = []
    async with Supervisor(on_give_up=on_give_up) as sup:
        ref = await sup.spawn(lambda: Recorder([], starts), name="crashy", policy=FAST)
        for _ in range(FAST.max_restarts + 1):
            await ref.tell("boom")
        with anyio.fail_after(5):
            await done.wait()
        with pytest.raises(ActorStopped):
            await ref.tell("more")
        assert not ref.alive
        assert sup.get("crashy") is None
    assert gave_up == [("crashy", "boom")]
    assert len(starts) == FAST.max_restarts + 1


async def test_queued_asks_fail_when_the_actor_gives_up() -> None:
    gate = Gate()
    results: list[BaseException] = []

    async def on_give_up(name: str, exc: BaseException) -> None:
        pass

    policy = RestartPolicy(max_restarts=0, backoff=Backoff(0.001, 0.001))
    async with Supervisor(on_give_up=on_give_up) as sup:
        ref = await sup.spawn(lambda: Recorder([], []), name="once", policy=policy)
        await ref.tell(gate)  # holds the actor busy while we queue behind it
        await ref.tell("boom")

        async def asker() -> None:
            try:
                await ref.ask("queued", timeout=5)
            except ActorStopped as exc:
                results.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(asker)
            gate.set()
    assert len(results) == 1


async def test_bounded_mailbox_pushes_back() -> None:
    gate = Gate()
    log: list[object] = []
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder(log, []), name="rec", mailbox_size=2)
        await ref.tell(gate)
        with anyio.fail_after(2):
            await gate.entered.wait()
        ref.tell_nowait("a")
        ref.tell_nowait("b")
        with pytest.raises(MailboxFull):
            ref.tell_nowait("c")
        with anyio.move_on_after(0.05) as scope:
            await ref.tell("c")
        assert scope.cancelled_caught, "tell must wait while the mailbox is full"
        gate.set()
        await ref.tell("c")
    assert log == ["a", "b", "c"]


class Lifecycle(Actor[str]):
    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def started(self) -> None:
        self.events.append("started")

    async def receive(self, message: str) -> object:
        if message == "hang":
            await anyio.sleep_forever()
        self.events.append(message)
        return None

    async def stopped(self) -> None:
        self.events.append("stopped")


async def test_orderly_shutdown_drains_the_mailbox_then_stops() -> None:
    events: list[str] = []
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Lifecycle(events), name="life")
        for m in ("a", "b", "c"):
            ref.tell_nowait(m)
    assert events == ["started", "a", "b", "c", "stopped"]
    with pytest.raises(ActorStopped):
        await ref.tell("late")


async def test_stop_one_actor_leaves_the_others() -> None:
    ev1: list[str] = []
    ev2: list[str] = []
    async with Supervisor() as sup:
        one = await sup.spawn(lambda: Lifecycle(ev1), name="one")
        two = await sup.spawn(lambda: Lifecycle(ev2), name="two")
        await one.tell("x")
        await one.stop()
        assert not one.alive and two.alive
        await two.ask("y", timeout=2)
    assert ev1 == ["started", "x", "stopped"]
    assert ev2 == ["started", "y", "stopped"]


async def test_shutdown_cancels_a_hung_actor_after_the_grace() -> None:
    events: list[str] = []
    with anyio.fail_after(5):
        async with Supervisor(stop_grace=0.05) as sup:
            ref = await sup.spawn(lambda: Lifecycle(events), name="hung")
            await ref.tell("hang")
    assert events == ["started"]
    assert not ref.alive


async def test_failing_start_counts_against_the_budget() -> None:
    gave_up = anyio.Event()

    class BadStart(Actor[str]):
        async def started(self) -> None:
            raise OSError("cannot open")

    async def on_give_up(name: str, exc: BaseException) -> None:
        assert isinstance(exc, OSError)
        gave_up.set()

    async with Supervisor(on_give_up=on_give_up) as sup:
        await sup.spawn(BadStart, name="bad", policy=FAST)
        with anyio.fail_after(5):
            await gave_up.wait()


async def test_spawn_rejects_duplicate_names() -> None:
    async with Supervisor() as sup:
        await sup.spawn(lambda: Lifecycle([]), name="same")
        with pytest.raises(ValueError):
            await sup.spawn(lambda: Lifecycle([]), name="same")


def test_backoff_doubles_to_its_cap_with_jitter_in_the_upper_half() -> None:
    from runtime.loops import backoff

    for attempt, ceiling in [(1, 0.05), (2, 0.1), (3, 0.2), (6, 1.0), (60, 1.0)]:
        delays = [backoff(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1, "jitter: two clients must not retry in lockstep"
    assert backoff(1, initial=1.0, maximum=0.3) <= 0.3


async def test_asks_in_flight_or_queued_when_an_actor_is_cancelled_learn_it_at_once() -> None:
    class Stuck(Actor[int]):
        async def receive(self, message: int) -> None:
            await anyio.sleep_forever()

    answers: dict[int, str] = {}

    async def ask(ref: ActorRef[int], n: int) -> None:
        try:
            await ref.ask(n, timeout=60)
        except ActorStopped as exc:
            answers[n] = str(exc)

    with anyio.fail_after(10):  # far below the asks' own timeout
        async with anyio.create_task_group() as tg, Supervisor(stop_grace=0.05) as sup:
            ref = await sup.spawn(Stuck, name="stuck")
            tg.start_soon(ask, ref, 1)  # taken, never answered
            tg.start_soon(ask, ref, 2)  # queued behind it
            await anyio.wait_all_tasks_blocked()
            # Leaving: past the grace, the busy actor is cancelled.
    assert answers == {1: "actor stuck is stopped", 2: "actor stuck is stopped"}


async def test_a_cancelled_asker_loses_nothing_and_the_actor_goes_on() -> None:
    gate = Gate()
    log: list[object] = []
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder(log, []), name="rec")

        async def ask(message: object) -> None:
            await ref.ask(message, timeout=60)

        with anyio.CancelScope() as taken:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, gate)
                with anyio.fail_after(5):
                    await gate.entered.wait()  # the actor holds it: an answer is owed
                tg.start_soon(ask, "queued")  # behind it in the mailbox
                await anyio.wait_all_tasks_blocked()
                taken.cancel()
        assert taken.cancelled_caught
        gate.set()
        assert await ref.ask("after", timeout=5) == "got after"
    # The cancelled asks' messages were still handled, in order; their
    # answers were dropped.
    assert log == ["queued", "after"]


async def test_an_answer_that_came_before_the_askers_cancellation_is_not_lost() -> None:
    scope = anyio.CancelScope()

    async def on_give_up(name: str, exc: BaseException) -> None:
        # Runs right after the actor answered the ask with its error, before
        # the asker wakes.
        scope.cancel()

    policy = RestartPolicy(max_restarts=0, backoff=Backoff(0.001, 0.001))
    async with Supervisor(on_give_up=on_give_up) as sup:
        ref = await sup.spawn(lambda: Recorder([], []), name="once", policy=policy)
        with scope, anyio.fail_after(5), pytest.raises(RuntimeError, match="boom"):
            await ref.ask("boom", timeout=60)


async def test_a_short_ask_times_out_on_its_own_behind_a_long_one() -> None:
    gate = Gate()
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder([], []), name="rec")
        answers: list[object] = []

        async def long_ask() -> None:
            answers.append(await ref.ask(gate, timeout=60))

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_ask)
            with anyio.fail_after(5):
                await gate.entered.wait()
                with pytest.raises(AskTimeout, match=r"within 0\.05s"):
                    await ref.ask("short", timeout=0.05)
            gate.set()
        assert answers == ["released"]
        assert await ref.ask("again", timeout=0.05) == "got again"


async def test_an_ask_waiting_for_room_that_times_out_or_is_cancelled_adds_nothing() -> None:
    gate = Gate()
    log: list[object] = []
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder(log, []), name="rec", mailbox_size=1)
        await ref.tell(gate)
        with anyio.fail_after(5):
            await gate.entered.wait()
        await ref.tell("queued")  # the mailbox is full now
        with pytest.raises(AskTimeout):
            await ref.ask("timed out", timeout=0.05)
        with anyio.move_on_after(0.05) as scope:
            await ref.ask("cancelled", timeout=60)
        assert scope.cancelled_caught
        gate.set()
        assert await ref.ask("after", timeout=5) == "got after"
    assert log == ["queued", "after"]


async def test_an_ask_that_waited_for_room_gets_the_actors_own_error() -> None:
    class Raises(Actor[object]):
        async def receive(self, message: object) -> object:
            if isinstance(message, Gate):
                message.entered.set()
                await message.release.wait()
                return None
            raise TimeoutError("the actor's own")

    gate = Gate()
    async with Supervisor() as sup:
        ref = await sup.spawn(Raises, name="raises", mailbox_size=1, policy=FAST)
        await ref.tell(gate)
        with anyio.fail_after(5):
            await gate.entered.wait()
        await ref.tell("fills the mailbox")
        errors: list[BaseException] = []

        async def asker() -> None:
            try:
                await ref.ask("waits for room", timeout=60)
            except TimeoutError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(asker)
            await anyio.wait_all_tasks_blocked()
            gate.set()
    assert [str(e) for e in errors] == ["the actor's own"]
    assert not isinstance(errors[0], AskTimeout)


async def test_ask_nowait_gives_the_answer_the_error_or_the_timeout_in_a_future() -> None:
    log: list[object] = []
    gate = Gate()
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: Recorder(log, []), name="rec", mailbox_size=2, policy=FAST)
        with anyio.fail_after(5):
            assert await ref.ask_nowait("one", timeout=2) == "got one"
            with pytest.raises(RuntimeError, match="boom"):
                await ref.ask_nowait("boom", timeout=2)
            # Busy behind the gate: the next ask waits past its timeout.
            held = ref.ask_nowait(gate, timeout=5)
            await gate.entered.wait()
            late = ref.ask_nowait("late", timeout=0.05)
            ref.ask_nowait("queued", timeout=5)
            with pytest.raises(MailboxFull):
                ref.ask_nowait("no room", timeout=5)
            with pytest.raises(AskTimeout):
                await late
            gate.set()
            assert await held == "released"
            await ref.stop()
        with pytest.raises(ActorStopped):
            ref.ask_nowait("after", timeout=2)
    assert log == ["one", "late", "queued"]


async def test_ask_nowait_to_an_actor_that_gave_up_is_refused_not_left_pending() -> None:
    class NeverStarts(Actor[object]):
        async def started(self) -> None:
            raise RuntimeError("cannot start")

    settled: list[BaseException | None] = []
    async with Supervisor() as sup:
        ref = await sup.spawn(NeverStarts, name="never", policy=FAST)
        answer = ref.ask_nowait("queued", timeout=60)
        answer.add_done_callback(lambda done: settled.append(done.exception()))
        # Refused when it gives up past its budget, not at the ask's timeout.
        with anyio.fail_after(5), pytest.raises(ActorStopped, match="gave up"):
            await answer
        assert [type(exc) for exc in settled] == [ActorStopped]
        assert not ref.alive
        with pytest.raises(ActorStopped):
            ref.ask_nowait("after", timeout=2)
