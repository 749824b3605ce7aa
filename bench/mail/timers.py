"""Timers through a real `mailrun up`: many due at one instant across runs,
or one at a time on an idle hub; how late each fires and is handled.

    .venv/bin/python bench/mail/timers.py [--runs 100] [--timers 100] [--lead 5] [--json]
    .venv/bin/python bench/mail/timers.py --idle [--repeat 20] [--json]

Deploys a workflow whose top-level run, on one mail, spawns ``--runs`` child
runs; then one signal per child (payload JSON) has it set ``--timers``
timers all due at one absolute time T, ``--lead`` seconds after the first
signal: timers due together in many runs, as workflows set them, not in one
run's queue. Each child records ``{name: [due_at, fired_at, time.time() at
the handler]}`` in its state and completes once it saw them all; the bench
polls the parent (under a deadline) until every child ended, then reads
their states. Prints the lateness of the fires (fired_at - due_at: the hub
stamps each page of fires with the time its transaction ran), due to
handler (p50, p99, max), the last one handled after T, and whether each
timer was seen once and each run's in the order it set them (one due
time: the hub breaks the tie by set time); exits 1 when not,
or when a run set its timers after T. ``--idle``: one timer due in 2 s on
an otherwise idle hub, ``--repeat`` times one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.mail.bench_e2e import admin_of_up, scratch_dir, spread
from runtime.loops import loop_options
from tests.support import wait_for

TIMERS = """
import time


async def main(ctx, item):
    if item.kind == "mail":
        runs = int(item.subject)
        ctx.state.update(ended=0, children=[await ctx.spawn("flow:child") for _ in range(runs)])
    elif item.kind == "child":
        ctx.state["ended"] += 1


async def child(ctx, item):
    if item.kind == "signal":
        spec = item.payload
        for i in range(spec["timers"]):
            ctx.set_timer(f"{spec['round']:03d}-{i:05d}", at=spec["due_at"])
        armed = ctx.state.get("armed", 0) + spec["timers"]
        ctx.state.update(armed=armed, armed_at=time.time(), last=spec["last"])
    elif item.kind == "timer":
        fires = ctx.state.setdefault("fires", {})
        if item.name in fires:
            ctx.state["twice"] = ctx.state.get("twice", 0) + 1
        fires[item.name] = [item.due_at, item.fired_at, time.time()]
        if ctx.state["last"] and len(fires) == ctx.state["armed"]:
            ctx.complete(len(fires))
"""


async def bench(runs: int, timers: int, lead: float, idle: int, tmp: Path) -> dict[str, Any]:
    async with admin_of_up(tmp) as call:
        status, dep = await call(
            "POST",
            "/workflows/deployments",
            json={"name": "timers", "source": TIMERS, "entrypoint": "flow:main"},
        )
        assert status == 201, dep
        mail = {"to": dep["address"], "subject": str(1 if idle else runs)}
        status, sent = await call("POST", "/mail", json=mail)
        assert status == 202, sent

        async def run_state(run_id: str) -> dict[str, Any]:
            status, run = await call("GET", f"/runs/{run_id}")
            assert status == 200, run
            return dict(run.get("state") or {})

        async def spawned() -> list[str] | None:
            return (await run_state(sent["run_id"])).get("children")

        children = await wait_for(spawned, timeout=120, interval=0.05, what="the children")

        async def arm(run_id: str, round: int, count: int, due_at: float, last: bool) -> None:
            spec = {"round": round, "timers": count, "due_at": due_at, "last": last}
            status, got = await call(
                "POST", f"/runs/{run_id}/signals", json={"name": "arm", "payload": spec}
            )
            assert status == 202, got

        if idle:
            for n in range(idle):
                await arm(children[0], n, 1, time.time() + 2.0, last=n == idle - 1)

                async def fired(n: int = n) -> bool:
                    return f"{n:03d}-00000" in (await run_state(children[0])).get("fires", {})

                await wait_for(fired, timeout=60, interval=0.05, what=f"idle timer {n}")
        else:
            due_at = time.time() + lead
            for run_id in children:
                await arm(run_id, 0, timers, due_at, last=True)
            sent_by = time.time()

            async def ended() -> bool:
                return bool((await run_state(sent["run_id"]))["ended"] == len(children))

            await wait_for(ended, timeout=600, interval=0.2, what="every timer handled")
        states = [await run_state(run_id) for run_id in children]
    fires = [f for s in states for f in s.get("fires", {}).values()]
    expected = [f"{n:03d}-{i:05d}" for n in range(idle or 1) for i in range(1 if idle else timers)]
    figures: dict[str, Any] = {
        "runs": len(children),
        "timers": len(fires),
        "idle": bool(idle),
        "fire_lateness": spread([fired - due for due, fired, _ in fires]),
        "due_to_handler": spread([seen - due for due, _, seen in fires]),
        # Each run's timers in the order it set them (the tie of one due time
        # broken by set time), each seen once.
        "exactly_once": all(
            sorted(s.get("fires", {})) == expected and not s.get("twice") for s in states
        ),
        "in_order": all(
            [name for name, _ in sorted(s.get("fires", {}).items(), key=lambda kv: kv[1][2])]
            == expected
            for s in states
        ),
    }
    if not idle:
        last = max(seen for _, _, seen in fires) - due_at
        figures.update(
            lead_s=lead,
            signals_sent_before_due_s=round(due_at - sent_by, 3),
            armed_before_due=all(s["armed_at"] < due_at for s in states),
            last_handled_after_due_s=round(last, 3),
            handled_per_s=round(len(fires) / last) if last > 0 else None,
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="child runs setting timers")
    parser.add_argument("--timers", type=int, default=100, help="timers each run sets")
    parser.add_argument("--lead", type=float, default=5.0,
                        help="seconds from the first signal to the one due time")  # fmt: skip
    parser.add_argument("--idle", action="store_true",
                        help="one timer due in 2 s at a time on an idle hub")  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=20, help="timers one after the other (--idle)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args()
    if min(args.runs, args.timers, args.repeat) < 1 or args.lead <= 0:
        parser.error("--runs, --timers, --repeat and --lead must be positive")
    with scratch_dir("mailrun-timers-", keep=args.keep) as tmp:
        figures = anyio.run(
            bench,
            args.runs,
            args.timers,
            args.lead,
            args.repeat if args.idle else 0,
            tmp,
            backend_options=loop_options(os.environ),
        )
    for key, value in figures.items() if not args.json else ():
        print(f"{key:<26} {value}")
    if args.json:
        print(json.dumps(figures, indent=2))
    if not (figures["exactly_once"] and figures["in_order"]):
        sys.exit("FAILED: a timer was missed, seen twice or out of order")
    if not figures.get("armed_before_due", True):
        sys.exit("FAILED: a run set its timers after their due time: raise --lead")


if __name__ == "__main__":
    main()
