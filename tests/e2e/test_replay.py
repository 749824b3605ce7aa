"""`mailrun replay` end to end: a real `mailrun up` runs v1 of a workflow over
a few mails; the CLI then replays the run against new code. The same
computation exits 0, a state that differs from the third item on exits 1
naming that item with both states, code that does not load exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from .harness import MAILRUN, mailrun_up

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
