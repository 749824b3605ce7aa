"""`mailrun replay` end to end: a real `mailrun up` runs v1 of a workflow over
a few mails; the CLI then replays the run against new code. The same
computation exits 0, a state that differs from the third item on exits 1
naming that item with both states, code that does not load exits 2. A run
that set and cancelled timers replays without a difference, and code that
sets another timer differs in its effects; a run that took steps replays
without calling them, and code that renames or swaps them differs in its
steps."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from ..harness import MAILRUN, Up, mailrun_up, send_accepted

pytestmark = pytest.mark.anyio

V1 = """
async def main(ctx, item):
    ctx.state.setdefault("subjects", []).append(item.subject)
    ctx.state["count"] = len(ctx.state["subjects"])
"""

# The same state, computed another way.
SAME = """
async def main(ctx, item):
    subjects = [*ctx.state.get("subjects", []), item.subject]
    ctx.state.update(subjects=subjects, count=len(subjects))
"""

# From the third item on it also keeps the last subject.
DIFFERS = (
    V1
    + """
    if ctx.state["count"] >= 3:
        ctx.state["last"] = item.subject
"""
)

SUBJECTS = ["one", "two", "three", "four"]


async def test_replay_reports_no_difference_the_first_difference_or_an_error(
    tmp_path: Path,
) -> None:
    files = {"same": SAME, "differs": DIFFERS, "broken": "async def main(ctx, item)\n"}
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("counter", V1)
        receipts = []
        for subject in SUBJECTS:
            r = await up.send(dep["address"], subject)
            assert r.status_code == 202, r.text
            receipts.append(r.json())
        run_id = receipts[0]["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("count") == len(SUBJECTS))

        async def replay(name: str, *extra: str) -> tuple[int, str, str]:
            done = await anyio.run_process(
                [MAILRUN, "replay", run_id, "--file", str(tmp_path / f"{name}.py"), *extra,
                 *up.hub_options],
                check=False,
            )  # fmt: skip
            return done.returncode, done.stdout.decode(), done.stderr.decode()

        code, out, err = await replay("same")
        assert code == 0, out + err
        assert "4 item(s) replayed (steps 1-4)" in out and "no difference" in out

        code, out, err = await replay("differs", "--json")
        assert code == 1, out + err
        report = json.loads(out)
        assert (report["differs"], report["replayed"], report["start"]) == (True, 3, "beginning")
        difference = report["difference"]
        assert (difference["step"], difference["what"]) == (3, "state")
        assert difference["dispatch_id"] == receipts[2]["dispatch_id"]
        recorded = {"subjects": ["one", "two", "three"], "count": 3}
        assert difference["recorded"] == {"state": recorded}
        assert difference["replayed"] == {"state": {**recorded, "last": "three"}}

        code, out, err = await replay("broken")
        assert code == 2, out + err
        assert "replay_failed" in err and "SyntaxError" in err


async def replay_code(up: Up, run_id: str, path: Path, *extra: str) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [MAILRUN, "replay", run_id, "--file", str(path), *extra, *up.hub_options], check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


TIMERS = """
import datetime


async def main(ctx, item):
    ctx.state["count"] = ctx.state.get("count", 0) + 1
    if item.subject == "set":
        ctx.set_timer("remind", after=3600, payload={"count": ctx.state["count"]})
        ctx.set_timer("deadline", at=datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC))
    elif item.subject == "cancel":
        ctx.cancel_timer("remind")
"""


async def test_a_run_that_set_and_cancelled_timers_replays_its_timers_as_effects(
    tmp_path: Path,
) -> None:
    (tmp_path / "same.py").write_text(TIMERS)
    (tmp_path / "other.py").write_text(TIMERS.replace('"remind", after', '"nudge", after'))
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("timers", TIMERS)
        receipts = [await send_accepted(up, dep["address"], s) for s in ("set", "cancel")]
        run_id = receipts[0]["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("count") == 2)

        code, out, err = await replay_code(up, run_id, tmp_path / "same.py")
        assert code == 0, out + err
        assert "2 item(s) replayed (steps 1-2)" in out and "no difference" in out

        code, out, err = await replay_code(up, run_id, tmp_path / "other.py", "--json")
        assert code == 1, out + err
        difference = json.loads(out)["difference"]
        assert (difference["step"], difference["what"]) == (1, "effects")
        assert difference["dispatch_id"] == receipts[0]["dispatch_id"]
        remind = {"kind": "timer", "name": "remind", "payload": {"count": 1}}
        deadline = {"kind": "timer", "name": "deadline", "payload": None}
        # A recorded timer shows when it was due; a replayed delay does not.
        recorded = difference["recorded"]["effects"]
        assert [{k: v for k, v in e.items() if k != "due_at"} for e in recorded] == [
            remind,
            deadline,
        ]
        assert recorded[1]["due_at"] == 4070908800.0  # 2099-01-01T00:00:00Z
        assert difference["replayed"]["effects"] == [
            {**remind, "name": "nudge"},
            {**deadline, "due_at": 4070908800.0},
        ]


STEPS = """
from pathlib import Path


def append(word):
    with Path({log!r}).open("a") as f:
        f.write(word + "\\n")
    return word.upper()


async def main(ctx, item):
    got = [await ctx.step(name, append, name) for name in {names!r}]
    ctx.state.setdefault("got", []).append(got)
"""


async def test_a_run_that_took_steps_replays_without_calling_them(tmp_path: Path) -> None:
    log = tmp_path / "steps.log"
    sources = {
        "same": ["charge", "ship"],
        "renamed": ["charge", "deliver"],
        "swapped": ["ship", "charge"],
    }
    for name, names in sources.items():
        (tmp_path / f"{name}.py").write_text(STEPS.format(log=str(log), names=names))
    async with mailrun_up(tmp_path) as up:
        # One attempt: a handler that raises suspends its run at once.
        source = STEPS.format(log=str(log), names=["charge", "ship"])
        dep = await up.deploy("steps", source, max_attempts=1)
        receipts = [await send_accepted(up, dep["address"], s) for s in ("one", "two")]
        run_id = receipts[0]["run_id"]
        await up.wait_state(
            run_id,
            lambda r: len(r["state"].get("got", [])) == 2 or r["status"] == "suspended",
        )
        run = await up.run(run_id)
        assert run["state"] == {"got": [["CHARGE", "SHIP"]] * 2}, run
        # The sidecar called each step once per item: the file is the run's.
        assert log.read_text() == "charge\nship\n" * 2

        code, out, err = await replay_code(up, run_id, tmp_path / "same.py")
        assert code == 0, out + err
        assert "2 item(s) replayed (steps 1-2)" in out and "no difference" in out

        for name, replayed in (("renamed", sources["renamed"]), ("swapped", sources["swapped"])):
            code, out, err = await replay_code(up, run_id, tmp_path / f"{name}.py", "--json")
            assert code == 1, out + err
            difference = json.loads(out)["difference"]
            assert (difference["step"], difference["what"]) == (1, "steps"), difference
            assert difference["dispatch_id"] == receipts[0]["dispatch_id"]
            assert difference["recorded"] == {"steps": ["charge", "ship"]}
            assert difference["replayed"] == {"steps": replayed}
        # No replay called a step.
        assert log.read_text() == "charge\nship\n" * 2
