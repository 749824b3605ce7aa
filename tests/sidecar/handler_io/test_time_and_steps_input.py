"""Bad input to the calls of time and steps: each a typed error at the call,
with its reason, and nothing of the item committed when the handler lets it
escape. The calls are the Context's (unit tests with a recorder in memory);
the "nothing committed" half runs the sidecar's own run actors in the kit."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

from runtime.wire import MAX_STEP_RESULT, MAX_TIMER_PAYLOAD, StepRecorded, TimerCancelled, TimerSet
from sidecar import (
    DuplicateStep,
    InvalidStep,
    InvalidTimer,
    LimitExceeded,
    StateNotSerializable,
    StepFailed,
    StepRetry,
)
from sidecar.execution import Context
from sidecar.testing import WorkflowTest

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0


class Recorder:
    def __init__(self) -> None:
        self.steps: list[StepRecorded] = []

    async def record(self, step: StepRecorded) -> None:
        self.steps.append(step)


async def _no_wait(_: float) -> None:
    return None


def _ctx(recorder: Recorder | None = None, **steps: StepRecorded) -> Context:
    return Context(
        run_id="run_1",
        deployment_id="dep_1",
        dispatch_id="dsp_1",
        state={},
        minter=None,
        steps=steps,
        recorder=recorder if recorder is not None else Recorder(),
        now=lambda: NOW,
        sleep=_no_wait,
    )


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({}, r"one of after= \(a delay\) or at= \(a time\)"),
        ({"after": 1, "at": NOW + 5}, r"one of after= \(a delay\) or at= \(a time\)"),
        ({"after": -1}, "finite delay >= 0"),
        ({"after": math.nan}, "finite delay >= 0"),
        ({"after": math.inf}, "finite delay >= 0"),
        ({"after": True}, "seconds or a timedelta"),
        ({"after": "5"}, "seconds or a timedelta"),
        ({"at": datetime.datetime(2030, 1, 1)}, "aware datetime"),
        ({"at": "tomorrow"}, "epoch seconds or an aware datetime"),
        ({"after": 1, "payload": {"x": object()}}, "not JSON-able"),
    ],
)
def test_a_timer_that_cannot_be_set_is_a_typed_error(kwargs: dict[str, Any], reason: str) -> None:
    ctx = _ctx()
    with pytest.raises(InvalidTimer, match=reason):
        ctx.set_timer("remind", **kwargs)
    assert ctx.events == []


@pytest.mark.parametrize("name", ["", 7, None, "x" * 201])
def test_a_timer_needs_a_name(name: Any) -> None:
    ctx = _ctx()
    with pytest.raises(InvalidTimer, match="timer name"):
        ctx.set_timer(name, after=1)
    with pytest.raises(InvalidTimer, match="timer name"):
        ctx.cancel_timer(name)
    assert ctx.events == []


def test_a_timer_payload_over_its_limit_is_refused() -> None:
    ctx = _ctx()
    with pytest.raises(LimitExceeded, match=MAX_TIMER_PAYLOAD.name):
        ctx.set_timer("big", after=1, payload="x" * MAX_TIMER_PAYLOAD.bytes)
    assert ctx.events == []


def test_timers_are_events_due_when_the_call_says() -> None:
    ctx = _ctx()
    assert ctx.set_timer("a", after=datetime.timedelta(hours=1), payload=[1]) == NOW + 3600
    # A time in the past is taken: the hub fires it at once.
    assert ctx.set_timer("b", at=NOW - 60) == NOW - 60
    zone = datetime.timezone(datetime.timedelta(hours=2))
    at = datetime.datetime.fromtimestamp(NOW + 10, zone)
    assert ctx.set_timer("c", at=at) == pytest.approx(NOW + 10)
    ctx.cancel_timer("b")
    made = [(type(e), getattr(e, "name", ""), getattr(e, "due_at", None)) for e in ctx.events]
    assert made == [
        (TimerSet, "a", NOW + 3600),
        (TimerSet, "b", NOW - 60),
        (TimerSet, "c", pytest.approx(NOW + 10)),
        (TimerCancelled, "b", None),
    ]


@pytest.mark.parametrize("timeout", [0, -5, math.nan, math.inf, True, "60"])
async def test_an_approval_timeout_must_be_seconds_above_zero(timeout: Any) -> None:
    ctx = _ctx()
    with pytest.raises(InvalidTimer, match="approval timeout"):
        await ctx.request_approval("ok?", timeout=timeout)
    assert ctx.events == [] and ctx.approvals == []


async def test_an_approval_with_a_timeout_says_when_it_expires() -> None:
    ctx = _ctx()
    await ctx.request_approval("ok?", timeout=90)
    (asked,) = ctx.events
    assert asked.expires_at == NOW + 90  # type: ignore[union-attr]


async def test_a_step_name_is_taken_once_per_item() -> None:
    ctx = _ctx()
    assert await ctx.step("charge", lambda: 1) == 1
    with pytest.raises(DuplicateStep, match="'charge'"):
        await ctx.step("charge", lambda: 2)


@pytest.mark.parametrize(
    ("args", "kwargs", "reason"),
    [
        (("", print), {}, "step name"),
        (("x" * 201, print), {}, "step name"),
        (("s", "not callable"), {}, "not callable"),
        (("s", print), {"retry": 3}, "must be a StepRetry"),
        (("s", print), {"retry": StepRetry(attempts=0)}, "attempts must be 1 or more"),
        (("s", print), {"retry": StepRetry(backoff=-1)}, "backoff must be a finite number"),
    ],
)
async def test_a_step_that_cannot_be_taken_is_a_typed_error(
    args: tuple[Any, ...], kwargs: dict[str, Any], reason: str
) -> None:
    recorder = Recorder()
    with pytest.raises(InvalidStep, match=reason):
        await _ctx(recorder).step(*args, **kwargs)
    assert recorder.steps == []


async def test_a_result_that_is_not_json_is_recorded_as_the_step_s_failure() -> None:
    """The call was made: its result cannot be kept, so the step fails for good
    (typed now, StepFailed when the item is processed again), never called twice."""
    recorder, calls = Recorder(), []

    def opens_a_ticket() -> object:
        calls.append(1)
        return {"ticket": object()}

    with pytest.raises(StateNotSerializable, match="step 'open'"):
        await _ctx(recorder).step("open", opens_a_ticket)
    (record,) = recorder.steps
    assert record.error is not None and record.error.startswith("StateNotSerializable")
    again = _ctx(recorder, open=record)
    with pytest.raises(StepFailed, match="StateNotSerializable"):
        await again.step("open", opens_a_ticket)
    assert calls == [1]


async def test_a_result_over_its_limit_is_recorded_as_the_step_s_failure() -> None:
    recorder = Recorder()
    with pytest.raises(LimitExceeded, match=MAX_STEP_RESULT.name):
        await _ctx(recorder).step("fetch", lambda: "x" * MAX_STEP_RESULT.bytes)
    (record,) = recorder.steps
    assert record.result is None and "LimitExceeded" in (record.error or "")


async def test_a_step_s_result_is_what_its_record_will_return() -> None:
    recorder = Recorder()
    ctx = _ctx(recorder)
    assert await ctx.step("pair", lambda: (1, "a")) == [1, "a"]

    async def later(x: int, *, y: int) -> dict[str, int]:
        return {"sum": x + y}

    assert await ctx.step("sum", later, 2, y=3) == {"sum": 5}
    assert [(s.name, s.index, s.result, s.attempts) for s in recorder.steps] == [
        ("pair", 1, [1, "a"], 1),
        ("sum", 2, {"sum": 5}, 1),
    ]


async def test_a_failing_step_is_called_as_its_retry_says_then_fails_for_good() -> None:
    recorder, calls = Recorder(), []

    def down() -> None:
        calls.append(1)
        raise ConnectionError("the ticket system is down")

    with pytest.raises(StepFailed, match="after 4 attempt"):
        await _ctx(recorder).step("open", down, retry=StepRetry(attempts=4, backoff=0.01))
    assert len(calls) == 4
    (record,) = recorder.steps
    assert (record.attempts, record.error) == (4, "ConnectionError: the ticket system is down")


_SENDS_THEN_FAILS = """
async def main(ctx, item):
    ctx.send("audit@example.org", "seen", item.subject)
    ctx.set_timer("later", after=60)
    if item.subject == "bad timer":
        ctx.set_timer("broken", after=-1)
    elif item.subject == "bad step":
        await ctx.step("twice", lambda: 1)
        await ctx.step("twice", lambda: 2)
    elif item.subject == "bad approval":
        await ctx.request_approval("ok?", timeout=0)
"""


@pytest.mark.parametrize(
    ("subject", "error"),
    [
        ("bad timer", "InvalidTimer"),
        ("bad step", "DuplicateStep"),
        ("bad approval", "InvalidTimer"),
    ],
)
async def test_an_escaping_error_commits_nothing_of_the_item(subject: str, error: str) -> None:
    async with WorkflowTest.from_sources({"flow.py": _SENDS_THEN_FAILS}, max_attempts=1) as wf:
        await wf.mail(subject)
        assert wf.status == "suspended"
        assert error in (wf.error or "")
        # The mail, the timer and the approval asked before the error: none of them.
        assert (wf.sent, wf.timers(), wf.approvals()) == ([], [], [])
