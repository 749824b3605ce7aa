"""Steps and timers in a replay (sidecar/replay), fed hand-built jobs: a step
returns (or raises) what the run recorded without calling its function, and
the steps differ where the new code takes one the run never took, takes them
in another order or leaves one out; timers, cancelled timers and approvals
that expire are effects, a timer's due time compared only when it is no
delay from the clock; a timer's own item reaches the handler as it fired."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import RecordedEffect, RecordedEnd, ReplayItem, ReplayJob, ReplayReport, new_id
from runtime.sidecar_contract import Recorded
from runtime.wire import TIMER_KIND, StepRecorded, TimerFired
from sidecar.replay import replay

pytestmark = pytest.mark.anyio

RUN = "run_00000000000000000000000001"

# Each step appends to a file: a replay that called one would write to it.
TWO_STEPS = """
from pathlib import Path

LOG = Path({log!r})


def append(word):
    with LOG.open("a") as f:
        f.write(word + "\\n")
    return word.upper()


async def main(ctx, item):
    first = await ctx.step("{first}", append, "one")
    second = await ctx.step("{second}", append, "two")
    ctx.state.setdefault("got", []).append([first, second])
"""


def two_steps(log: Path, first: str = "charge", second: str = "ship") -> str:
    return TWO_STEPS.format(log=str(log), first=first, second=second)


def dispatch(n: int) -> str:
    return f"dsp_{n:026x}"


def step(
    n: int, name: str, index: int, result: Any = None, error: str | None = None
) -> StepRecorded:
    return StepRecorded(
        event_id=new_id("evt"),
        run_id=RUN,
        dispatch_id=dispatch(n),
        name=name,
        index=index,
        result=result,
        error=error,
    )


def item(
    n: int,
    state: dict[str, Any],
    *,
    steps: list[StepRecorded] | None = None,
    effects: list[RecordedEffect] | None = None,
    outcome: str = "processed",
    end: RecordedEnd | None = None,
) -> ReplayItem:
    return ReplayItem(
        dispatch_id=dispatch(n),
        seq=n,
        subject=f"m{n}",
        body=b"",
        step=n,
        recorded=Recorded(state=state, effects=effects or [], outcome=outcome, end=end),
        steps=steps or [],
    )


def two_step_items() -> list[ReplayItem]:
    """What TWO_STEPS recorded for two mails: each took charge then ship."""
    return [
        item(
            n,
            {"got": [["ONE", "TWO"]] * n},
            steps=[step(n, "charge", 1, "ONE"), step(n, "ship", 2, "TWO")],
        )
        for n in (1, 2)
    ]


async def run(tmp_path: Path, source: str, items: list[ReplayItem]) -> ReplayReport:
    job = ReplayJob(
        files={"flow.py": source},
        entrypoint="flow:main",
        deployment_id="dep_00000000000000000000000001",
        run_id=RUN,
        items=items,
    )
    return await replay(job, tmp_path / "src")


async def test_steps_return_what_was_recorded_without_calling_their_function(
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls.log"
    report = await run(tmp_path, two_steps(log), two_step_items())
    assert report.differs is False and report.difference is None
    assert report.replayed == 2
    assert not log.exists()  # no step was called


async def test_a_renamed_step_is_a_difference_of_steps_at_its_item(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    report = await run(tmp_path, two_steps(log, second="dispatch"), two_step_items())
    difference = report.difference
    assert difference is not None
    assert (difference.step, difference.dispatch_id, difference.what) == (1, dispatch(1), "steps")
    assert difference.recorded == {"steps": ["charge", "ship"]}
    assert difference.replayed == {"steps": ["charge", "dispatch"]}
    assert not log.exists()


async def test_swapped_steps_are_a_difference_of_steps(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    report = await run(tmp_path, two_steps(log, first="ship", second="charge"), two_step_items())
    difference = report.difference
    assert difference is not None and (difference.step, difference.what) == (1, "steps")
    assert difference.recorded == {"steps": ["charge", "ship"]}
    assert difference.replayed == {"steps": ["ship", "charge"]}
    assert not log.exists()


async def test_a_step_left_out_is_a_difference_of_steps(tmp_path: Path) -> None:
    one_step = two_steps(tmp_path / "calls.log").replace(
        'second = await ctx.step("ship", append, "two")', 'second = "TWO"'
    )
    report = await run(tmp_path, one_step, two_step_items())
    difference = report.difference
    assert difference is not None and (difference.step, difference.what) == (1, "steps")
    assert difference.recorded == {"steps": ["charge", "ship"]}
    assert difference.replayed == {"steps": ["charge"]}


async def test_a_step_the_handler_swallows_is_still_a_difference(tmp_path: Path) -> None:
    # The new code takes a step the run never took, and hides its failure:
    # in a sidecar it would call the function.
    catching = two_steps(tmp_path / "calls.log", first="refund").replace(
        '    first = await ctx.step("refund", append, "one")\n',
        "    try:\n"
        '        first = await ctx.step("refund", append, "one")\n'
        "    except Exception:\n"
        '        first = "ONE"\n',
    )
    report = await run(tmp_path, catching, two_step_items())
    difference = report.difference
    assert difference is not None and difference.what == "steps"
    assert difference.replayed == {"steps": ["refund", "ship"]}


async def test_a_step_that_failed_for_good_raises_as_recorded(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    source = two_steps(log).replace(
        '    first = await ctx.step("charge", append, "one")\n',
        "    try:\n"
        '        first = await ctx.step("charge", append, "one")\n'
        "    except Exception as exc:\n"
        "        first = type(exc).__name__\n",
    )
    items = [
        item(
            1,
            {"got": [["StepFailed", "TWO"]]},
            steps=[step(1, "charge", 1, error="OSError: no card"), step(1, "ship", 2, "TWO")],
        )
    ]
    report = await run(tmp_path, source, items)
    assert report.differs is False and report.replayed == 1
    assert not log.exists()


async def test_an_item_whose_recorded_run_raised_needs_not_take_every_step(
    tmp_path: Path,
) -> None:
    # The run's retries ran out on the item after its first step; the new
    # code raises sooner. Both raised: no difference.
    raising = two_steps(tmp_path / "calls.log").replace(
        '    second = await ctx.step("ship", append, "two")\n',
        '    raise ValueError("down")\n',
    )
    items = [
        item(
            1,
            {},
            steps=[step(1, "charge", 1, "ONE"), step(1, "ship", 2, "TWO")],
            outcome="failed",
            end=RecordedEnd(kind="failed", error="ValueError: down"),
        )
    ]
    report = await run(tmp_path, raising, items)
    assert report.differs is False and report.replayed == 1


TIMERS = """
import datetime


async def main(ctx, item):
    if item.subject == "m1":
        ctx.set_timer("remind", after=3600, payload={"n": 1})
        ctx.set_timer("deadline", at=datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC))
        await ctx.request_approval("ok?", timeout=60)
    else:
        ctx.cancel_timer("remind")
"""

DEADLINE = 1893456000.0  # 2030-01-01T00:00:00Z


def timer_items() -> list[ReplayItem]:
    """What TIMERS recorded: the delay's due time is the clock's of the day."""
    return [
        item(
            1,
            {},
            effects=[
                RecordedEffect(kind="timer", name="remind", payload={"n": 1}, due_at=1.7e9),
                RecordedEffect(kind="timer", name="deadline", due_at=DEADLINE),
                RecordedEffect(kind="approval", prompt="ok?", expires=True),
            ],
        ),
        item(2, {}, effects=[RecordedEffect(kind="timer_cancel", name="remind")]),
    ]


async def test_timers_set_and_cancelled_replay_without_a_difference(tmp_path: Path) -> None:
    report = await run(tmp_path, TIMERS, timer_items())
    assert report.differs is False and report.replayed == 2


@pytest.mark.parametrize(
    ("change", "replayed"),
    [
        (
            ('ctx.set_timer("remind"', 'ctx.set_timer("nudge"'),
            {"kind": "timer", "name": "nudge", "payload": {"n": 1}},
        ),
        (
            ('payload={"n": 1}', 'payload={"n": 2}'),
            {"kind": "timer", "name": "remind", "payload": {"n": 2}},
        ),
        # A time that is no delay from the clock: its due time is compared.
        (
            ("datetime.datetime(2030, 1, 1,", "datetime.datetime(2031, 1, 1,"),
            {
                "kind": "timer",
                "name": "deadline",
                "payload": None,
                "due_at": DEADLINE + 365 * 86400,
            },
        ),
        (("timeout=60", "timeout=None"), {"kind": "approval", "prompt": "ok?"}),
    ],
)
async def test_another_timer_or_approval_is_a_difference_of_effects(
    tmp_path: Path, change: tuple[str, str], replayed: dict[str, Any]
) -> None:
    report = await run(tmp_path, TIMERS.replace(*change), timer_items())
    difference = report.difference
    assert difference is not None and (difference.step, difference.what) == (1, "effects")
    assert replayed in difference.replayed["effects"]
    assert replayed not in difference.recorded["effects"]


async def test_another_cancelled_timer_is_a_difference_of_effects(tmp_path: Path) -> None:
    report = await run(
        tmp_path, TIMERS.replace('cancel_timer("remind")', 'cancel_timer("x")'), timer_items()
    )
    difference = report.difference
    assert difference is not None and (difference.step, difference.what) == (2, "effects")
    assert difference.recorded == {"effects": [{"kind": "timer_cancel", "name": "remind"}]}
    assert difference.replayed == {"effects": [{"kind": "timer_cancel", "name": "x"}]}


async def test_a_timer_item_is_handed_to_the_handler_as_it_fired(tmp_path: Path) -> None:
    source = """
async def main(ctx, item):
    ctx.state["woken"] = [item.kind, item.name, item.payload, item.fired_at - item.due_at]
"""
    fired = TimerFired(name="remind", due_at=100.0, fired_at=160.0, payload={"n": 1})
    woken = item(1, {"woken": ["timer", "remind", {"n": 1}, 60.0]})
    woken.kind, woken.subject, woken.body = TIMER_KIND, "remind", msgspec.json.encode(fired)
    assert (await run(tmp_path, source, [woken])).differs is False
    woken.recorded.state = {"woken": ["timer", "remind", {"n": 2}, 60.0]}
    report = await run(tmp_path, source, [woken])
    assert report.difference is not None and report.difference.what == "state"
