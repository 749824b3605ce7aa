"""Fan-out: a parent run spawns N children that each await 1 s (an API call,
say); how long until the parent has every child's end.

    .venv/bin/python bench/mail/fan_out.py [--children 8] [--rounds 3] [--json]

Starts `mailrun up` in a temporary dir on free loopback ports, deploys a
workflow whose parent spawns ``--children`` child runs from one mail, each
child `await anyio.sleep(1)` then completes, and the parent counts the
`child` items it gets. The time runs from the trigger (just before its POST)
to the parent's handler call on the last `child` item (the wall clock the
handler reads into its state; hub, sidecar and bench share the machine's).
The runs of one deployment are processed concurrently, at most
``max_concurrent_runs`` (16 by default) handler calls at once: 8 children
take about 1 s, 64 about 4 s; one run after the other, N children took
N seconds. Each round is a mail to the same parent (the deployment's run), which
starts over; prints the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.mail.bench_e2e import admin_of_up, scratch_dir
from runtime.loops import loop_options
from tests.support import wait_for

FAN_OUT = """
import time

import anyio


async def main(ctx, item):
    if item.kind == "child":
        ctx.state["ended"] = ctx.state.get("ended", 0) + 1
        if ctx.state["ended"] == ctx.state["children"]:
            ctx.state["all_ended_at"] = time.time()
        return
    # A round: the parent (the deployment's run) stays open for the next one.
    ctx.state.update(children=int(item.subject), ended=0, round=item.text, all_ended_at=None)
    for n in range(ctx.state["children"]):
        await ctx.spawn("flow:child", n)


async def child(ctx, item):
    await anyio.sleep(1)  # an API call
    ctx.complete(item.input)
"""


async def bench(children: int, rounds: int, tmp: Path) -> dict[str, Any]:
    took: list[float] = []
    async with admin_of_up(tmp) as call:
        status, dep = await call(
            "POST",
            "/workflows/deployments",
            json={"name": "fanout", "source": FAN_OUT, "entrypoint": "flow:main"},
        )
        assert status == 201, dep
        # A warm-up round (the sidecar starting, its first mint) is not measured.
        for n in range(rounds + 1):
            began = time.time()
            status, sent = await call(
                "POST",
                "/mail",
                json={"to": dep["address"], "subject": str(children), "body": f"round {n}"},
            )
            assert status == 202, sent
            run_id = sent["run_id"]

            async def ended(run_id: str = run_id, n: int = n) -> float | None:
                _, run = await call("GET", f"/runs/{run_id}")
                now = run.get("state") or {}
                at = now.get("all_ended_at") if now.get("round") == f"round {n}" else None
                return float(at) if at is not None else None

            at = await wait_for(ended, timeout=600, interval=0.05, what="every child ended")
            if n:
                took.append(at - began)
    return {
        "children": children,
        "rounds": rounds,
        "seconds": statistics.median(took),
        "each": [round(t, 3) for t in took],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args()
    if args.children < 1 or args.rounds < 1:
        parser.error("--children and --rounds must be positive")
    with scratch_dir("mailrun-fanout-", keep=args.keep) as tmp:
        figures = anyio.run(
            bench, args.children, args.rounds, tmp, backend_options=loop_options(os.environ)
        )
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"{figures['children']} children awaiting 1 s: every end at the parent after"
        f" {figures['seconds']:.2f} s (median of {figures['rounds']}: {figures['each']})"
    )


if __name__ == "__main__":
    main()
