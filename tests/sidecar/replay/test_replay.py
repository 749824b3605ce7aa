"""The replay executor (sidecar/_replay.py), fed hand-built jobs: the same code
finds no difference; new code is caught at the first item whose state,
effects or end differ, or where one side raised; migrate_state runs once on
the start state; code that does not load is a failure, not a difference.
One test runs the scratch process itself (``python -m sidecar.replay``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import RecordedEffect, RecordedEnd, ReplayItem, ReplayJob, ReplayReport
from runtime.sidecar_contract import Recorded
from sidecar.execution import derived_id
from sidecar.replay._run import (
    EXIT_FAILURE,
    EXIT_REPORT,
    ReplayFailure,
    replay,
)

pytestmark = pytest.mark.anyio

# The recorded workflow: keeps the subjects it saw, mails on "notify", asks
# for an approval on "ask", spawns a child on "spawn", completes on "stop".
V1 = """
async def main(ctx, item):
    ctx.state.setdefault("subjects", []).append(item.subject)
    if item.subject == "notify":
        ctx.send("ops@example.org", "seen " + item.subject, item.text)
    if item.subject == "ask":
        ctx.state["approval"] = await ctx.request_approval("ship it?")
    if item.subject == "spawn":
        ctx.state["child"] = await ctx.spawn("flow:child", {"n": 1})
    if item.subject == "stop":
        ctx.complete({"count": len(ctx.state["subjects"])})
"""

SUBJECTS = ["a", "notify", "ask", "spawn", "stop"]
CHILD = "run_00000000000000000000000042"


def recorded_items(subjects: list[str] = SUBJECTS) -> list[ReplayItem]:
    """The items V1 recorded for ``subjects``, as the hub hands them over."""
    items: list[ReplayItem] = []
    seen: list[str] = []
    state: dict[str, Any] = {}
    for step, subject in enumerate(subjects, start=1):
        seen = [*seen, subject]
        state = {**state, "subjects": seen}
        effects: list[RecordedEffect] = []
        end = None
        dispatch_id = f"dsp_{step:026x}"
        if subject == "notify":
            effects = [
                RecordedEffect(kind="mail", to="ops@example.org", subject="seen notify", body=b"hi")
            ]
        if subject == "ask":
            # The approval id is derived from the dispatch, as in a sidecar.
            state["approval"] = derived_id("apr", f"{dispatch_id}:approval:1")
            effects = [RecordedEffect(kind="approval", prompt="ship it?")]
        if subject == "spawn":
            state["child"] = CHILD
            effects = [
                RecordedEffect(
                    kind="spawn", entrypoint="flow:child", input={"n": 1}, child_run_id=CHILD
                )
            ]
        if subject == "stop":
            end = RecordedEnd(kind="completed", result={"count": len(seen)})
        items.append(
            ReplayItem(
                dispatch_id=dispatch_id,
                seq=step,
                subject=subject,
                sender="ann@example.org",
                body=b"hi",
                step=step,
                version=1,
                recorded=Recorded(state=state, effects=effects, end=end),
            )
        )
    return items


def job(source: str, items: list[ReplayItem] | None = None, **kw: Any) -> ReplayJob:
    return ReplayJob(
        files={"flow.py": source},
        entrypoint="flow:main",
        deployment_id="dep_00000000000000000000000001",
        run_id="run_00000000000000000000000001",
        items=recorded_items() if items is None else items,
        **kw,
    )


async def run(tmp_path: Path, the_job: ReplayJob) -> ReplayReport:
    return await replay(the_job, tmp_path / "src")


async def test_the_same_code_finds_no_difference(tmp_path: Path) -> None:
    report = await run(tmp_path, job(V1))
    assert report.differs is False and report.difference is None
    assert (report.replayed, report.first_step, report.last_step) == (5, 1, 5)
    assert report.start == "beginning"


async def test_a_changed_state_is_reported_at_its_first_item_with_both_states(
    tmp_path: Path,
) -> None:
    v2 = V1.replace(
        'ctx.state.setdefault("subjects", []).append(item.subject)',
        'ctx.state.setdefault("subjects", []).append(item.subject)\n'
        '    if item.subject == "ask":\n'
        '        ctx.state["asked"] = True',
    )
    report = await run(tmp_path, job(v2))
    assert report.differs is True
    assert report.replayed == 3 and report.last_step == 3
    difference = report.difference
    assert difference is not None
    assert (difference.step, difference.seq, difference.what) == (3, 3, "state")
    assert difference.dispatch_id == recorded_items()[2].dispatch_id
    recorded, replayed = difference.recorded["state"], difference.replayed["state"]
    assert recorded["subjects"] == ["a", "notify", "ask"] and "asked" not in recorded
    assert replayed == {**recorded, "asked": True}


async def test_a_changed_effect_is_a_difference_of_effects(tmp_path: Path) -> None:
    v2 = V1.replace('"seen " + item.subject', '"Seen: " + item.subject')
    report = await run(tmp_path, job(v2))
    difference = report.difference
    assert difference is not None
    assert (difference.step, difference.what) == (2, "effects")
    assert difference.recorded["effects"] == [
        {"kind": "mail", "to": "ops@example.org", "subject": "seen notify", "body": "hi"}
    ]
    assert difference.replayed["effects"] == [
        {"kind": "mail", "to": "ops@example.org", "subject": "Seen: notify", "body": "hi"}
    ]


async def test_a_state_holding_a_child_id_compares_equal_and_a_changed_end_differs(
    tmp_path: Path,
) -> None:
    v2 = V1.replace('ctx.complete({"count": len(ctx.state["subjects"])})', 'ctx.fail("no")')
    report = await run(tmp_path, job(v2))
    difference = report.difference
    assert difference is not None
    assert (difference.step, difference.what) == (5, "end")  # steps 1-4 (the spawn too) agree
    assert difference.recorded == {"end": {"kind": "completed", "result": {"count": 5}}}
    assert difference.replayed == {"end": {"kind": "failed", "error": "no"}}


async def test_a_handler_that_raises_where_the_run_processed_is_a_difference(
    tmp_path: Path,
) -> None:
    v2 = V1.replace(
        "async def main(ctx, item):\n",
        'async def main(ctx, item):\n    if item.subject == "notify":\n'
        '        raise ValueError("boom")\n',
    )
    report = await run(tmp_path, job(v2))
    difference = report.difference
    assert difference is not None
    assert (difference.step, difference.what) == (2, "error")
    assert difference.replayed == {"raised": "ValueError: boom"}
    assert difference.recorded == {"outcome": "processed", "state": {"subjects": ["a", "notify"]}}


async def test_a_recorded_failure_is_matched_by_a_raise_and_not_by_a_success(
    tmp_path: Path,
) -> None:
    items = recorded_items(["a", "b"])
    # The run's retries ran out on "b": its state stayed, the run failed.
    items[1].recorded = Recorded(
        state=items[0].recorded.state,
        outcome="failed",
        end=RecordedEnd(kind="failed", error="ValueError: boom"),
    )
    raising = V1.replace(
        "async def main(ctx, item):\n",
        'async def main(ctx, item):\n    if item.subject == "b":\n        raise ValueError("x")\n',
    )
    same = await run(tmp_path, job(raising, items))
    assert same.differs is False and same.replayed == 2
    fixed = await run(tmp_path, job(V1, items))
    difference = fixed.difference
    assert difference is not None and (difference.step, difference.what) == (2, "error")
    assert difference.recorded == {"outcome": "failed", "error": "ValueError: boom"}
    assert difference.replayed["outcome"] == "processed"


async def test_a_parked_item_is_replayed_like_a_failure_and_a_resume_is_skipped(
    tmp_path: Path,
) -> None:
    items = recorded_items(["a", "b", "resume", "c"])
    # "b" was parked past its budget (the state stayed); a resume (never a
    # handler's item) changed nothing; "c" went on from "a"'s state.
    items[1].recorded = Recorded(state=items[0].recorded.state, outcome="parked")
    items[2].kind, items[2].body = "resume", b""
    items[2].recorded = Recorded(state=items[0].recorded.state)
    items[3].recorded.state = {"subjects": ["a", "c"]}
    raising = V1.replace(
        "async def main(ctx, item):\n",
        'async def main(ctx, item):\n    if item.subject == "b":\n        raise ValueError("x")\n',
    )
    same = await run(tmp_path, job(raising, items))
    assert same.differs is False
    assert (same.replayed, same.first_step, same.last_step) == (3, 1, 4)
    fixed = await run(tmp_path, job(V1, items))
    assert fixed.difference is not None
    assert (fixed.difference.step, fixed.difference.what) == (2, "error")
    assert fixed.difference.recorded["outcome"] == "parked"


async def test_an_item_without_its_body_is_taken_as_recorded(tmp_path: Path) -> None:
    items = recorded_items(["a", "b", "c"])
    items[1].body = None  # claim-checked: the handler is not called with it
    # What the run recorded after "b" is where the replay goes on from.
    items[1].recorded.state = {"subjects": ["a", "b"], "from": "the record"}
    items[2].recorded.state = {"subjects": ["a", "b", "c"], "from": "the record"}
    report = await run(tmp_path, job(V1, items, skipped=["step 2: claim-checked"]))
    assert report.differs is False
    assert (report.replayed, report.first_step, report.last_step) == (2, 1, 3)
    assert report.skipped == ["step 2: claim-checked"]


async def test_migrate_state_runs_once_on_a_recorded_start_state(tmp_path: Path) -> None:
    v2 = V1 + (
        "\n\nasync def migrate_state(state, from_version):\n"
        "    return {**state, 'migrations': [*state.get('migrations', []), from_version]}\n"
    )
    # The history starts after step 1 (its earlier events were trimmed): the
    # new code takes over the state version 3 recorded, as after a rollout.
    items = recorded_items(["a", "b", "c"])[1:]
    for item in items:
        item.version = 3
        item.recorded.state = {**item.recorded.state, "migrations": [3]}
    start = {"start": "after step 1", "start_state": {"subjects": ["a"]}}
    report = await run(tmp_path, job(v2, items, **start))
    assert report.differs is False and report.replayed == 2
    # From the beginning there is no recorded state: no call, as in a sidecar
    # (a run's first item has no previous version).
    assert (await run(tmp_path, job(v2))).differs is False
    # The hook returns the state: anything else fails the replay.
    returns_nothing = V1 + "\n\nasync def migrate_state(state, from_version):\n    pass\n"
    with pytest.raises(ReplayFailure) as failed:
        await run(tmp_path, job(returns_nothing, items, **start))
    assert failed.value.error == "migrate_failed"


async def test_code_that_does_not_load_is_a_failure_not_a_difference(tmp_path: Path) -> None:
    with pytest.raises(ReplayFailure) as syntax:
        await run(tmp_path, job("async def main(ctx, item)\n    pass\n"))
    assert syntax.value.error == "load_failed" and "SyntaxError" in syntax.value.detail
    with pytest.raises(ReplayFailure) as missing:
        await run(tmp_path, job("async def other(ctx, item):\n    pass\n"))
    assert missing.value.error == "load_failed" and "has no 'main'" in missing.value.detail


@pytest.mark.slow  # real scratch processes
def test_the_scratch_process_answers_on_stdout_whatever_the_code_prints(tmp_path: Path) -> None:
    noisy = V1.replace(
        "async def main(ctx, item):\n", "async def main(ctx, item):\n    print('x')\n"
    )

    def scratch(source: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "sidecar.replay"],
            input=msgspec.json.encode(job(source)),
            capture_output=True,
            cwd=tmp_path,
            timeout=60,
            check=False,
        )

    done = scratch(noisy)
    assert done.returncode == EXIT_REPORT, done.stderr.decode()
    report = msgspec.json.decode(done.stdout, type=ReplayReport)
    assert report.differs is False and report.replayed == 5
    assert done.stderr.count(b"x\n") == 5
    broken = scratch("def (")
    assert broken.returncode == EXIT_FAILURE
    failure = msgspec.json.decode(broken.stdout)
    assert failure["error"] == "load_failed" and "SyntaxError" in failure["detail"]
