"""Lone mails through a real `mailrun up`: what one mail costs when mail
comes one at a time, as most deployments get it.

    .venv/bin/python bench/mail/lone_mail.py [--mails 500] [--rate 50] [--deployments 1]
        [--idle 5] [--json]

Deploys ``--deployments`` workflows (round-robin targets) whose handler
records ``time.time()`` as it starts, under the mail's subject, in its run's
state. Sends ``--mails`` single ``POST /mail`` at ``--rate`` a second,
paced by the clock (not by the answers: an offered rate), and waits (under
a deadline) until every handler saw its mail. Prints the POST-to-handler
latency (p50, p99, max; clocks of one machine) and the CPU each process
spent per mail while the mails were sent and handled (the hub, and the
sidecars together), and first what each spends a second over ``--idle``
seconds with nothing to do, so that the part of a mail's figure that is not
the mail's own shows. Exits 1 when a mail was not seen once.

The CPU is the scheduler's on-CPU time of every thread
(``/proc/PID/task/*/schedstat``, in nanoseconds): the user and system
times (``psutil``, also printed apart) come in 10 ms clock ticks, coarser
than a lone mail's whole cost, and a few hundred mails' sum of them moves
by a tick's rounding from run to run. A thread that ends during the mails
takes its time with it (the inbox's worker threads live on between uses).
``schedstat_per_mail`` adds, per mail, the time the threads waited for a
CPU (the machine's load, felt) and how many times they were put on one
(every wake of the loop or of a worker thread is one).
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
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.mail.bench_e2e import admin_of_up, scratch_dir, spread
from runtime.loops import loop_options
from tests.support import wait_for

LONE = """
import time


async def main(ctx, item):
    # A line a call in the sidecar's own directory, not in the run's state:
    # a lone mail's workflow keeps a small state, and a state that grew with
    # every mail would be written whole each time (most of a mail's pages).
    with open("handled.log", "a") as log:
        log.write(f"{item.subject} {time.time()}\\n")
"""


def processes(state: Path) -> dict[str, list[psutil.Process]]:
    """The hub and sidecar processes of the ``mailrun up`` in ``state``, by
    their argv (docs/design.md: the hub's says ``hub``, a sidecar's ``sidecar``)."""
    found: dict[str, list[psutil.Process]] = {"hub": [], "sidecar": []}
    for proc in psutil.process_iter(["cmdline"]):
        # A forked sidecar's title is one string: read as words.
        argv = " ".join(proc.info["cmdline"] or []).split()
        if not any(str(state) in arg for arg in argv):
            continue
        for role in found:
            if any(arg in (role, "-m" + role) for arg in argv) or ["-m", role] == argv[1:3]:
                found[role].append(proc)
    return found


def schedstat(pid: int) -> tuple[int, int, int]:
    """Of every live thread of ``pid`` together: the nanoseconds on a CPU,
    the nanoseconds waited for one, and the times put on one."""
    total = [0, 0, 0]
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return (0, 0, 0)
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                fields = stat.read().split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended since the listing
        for i in range(3):
            total[i] += int(fields[i])
    return (total[0], total[1], total[2])


def sched(procs: list[psutil.Process]) -> tuple[int, int, int]:
    """``schedstat`` of ``procs`` together."""
    each = [schedstat(proc.pid) for proc in procs]
    return (sum(e[0] for e in each), sum(e[1] for e in each), sum(e[2] for e in each))


def oncpu(procs: list[psutil.Process]) -> float:
    """The on-CPU seconds of ``procs`` together (schedstat)."""
    return sched(procs)[0] / 1e9


def priced(
    before: tuple[int, int, int], after: tuple[int, int, int], mails: int
) -> dict[str, float]:
    """A mail's on-CPU and waited-for-a-CPU ms, and the times its threads ran."""
    cpu, waited, runs = (b - a for a, b in zip(before, after, strict=True))
    return {
        "cpu_ms": round(cpu / mails / 1e6, 3),
        "waited_ms": round(waited / mails / 1e6, 3),
        "runs": round(runs / mails, 2),
    }


def split_cpu(procs: list[psutil.Process]) -> tuple[float, float]:
    """User and system CPU seconds of ``procs`` together."""
    user = system = 0.0
    for proc in procs:
        times = proc.cpu_times()
        user, system = user + times.user, system + times.system
    return user, system


def per_mail(before: int, after: int, mails: int) -> float:
    """On-CPU ms a mail, from two schedstat nanosecond readings."""
    return round((after - before) / mails / 1e6, 3)


def user_sys(before: tuple[float, float], after: tuple[float, float], mails: int) -> list[float]:
    """The user and the system CPU a mail, in ms (10 ms clock ticks summed)."""
    return [round((b - a) / mails * 1000, 3) for a, b in zip(before, after, strict=True)]


async def bench(
    mails: int, rate: float, deployments: int, tmp: Path, idle: float = 5.0
) -> dict[str, Any]:
    async with admin_of_up(tmp) as call:
        addresses = []
        for n in range(deployments):
            status, dep = await call(
                "POST",
                "/workflows/deployments",
                json={"name": f"lone{n}", "source": LONE, "entrypoint": "flow:main"},
            )
            assert status == 201, dep
            addresses.append(dep["address"])
        # One mail to each first: every sidecar up and its run started before the clock runs.
        for address in addresses:
            status, sent = await call("POST", "/mail", json={"to": address, "subject": "warm"})
            assert status == 202, sent

        def handled_lines() -> list[tuple[str, float]]:
            lines = []
            for log in (tmp / "state" / "sidecars").glob("*/handled.log"):
                for line in log.read_text().splitlines():
                    subject, at = line.split()
                    lines.append((subject, float(at)))
            return lines

        async def warm() -> bool:
            return sum(subject == "warm" for subject, _ in handled_lines()) >= deployments

        await wait_for(warm, timeout=120, interval=0.05, what="every deployment's first mail")
        procs = processes(tmp / "state")
        assert procs["hub"] and len(procs["sidecar"]) == deployments, procs
        # What the processes spend doing nothing, so the figures a mail can be read.
        idle_from = {role: oncpu(p) for role, p in procs.items()}
        await anyio.sleep(idle)
        idle_cpu = {role: oncpu(p) - idle_from[role] for role, p in procs.items()}
        before = {role: sched(p) for role, p in procs.items()}
        ticks = {role: split_cpu(p) for role, p in procs.items()}
        posted: dict[str, float] = {}
        start = time.monotonic()
        for i in range(mails):
            await anyio.sleep(max(0.0, start + i / rate - time.monotonic()))
            subject = f"m{i:06d}"
            posted[subject] = time.time()
            mail = {"to": addresses[i % deployments], "subject": subject}
            status, sent = await call("POST", "/mail", json=mail)
            assert status == 202, sent

        async def handled() -> list[tuple[str, float]] | None:
            lines = handled_lines()
            return lines if len(lines) >= mails + deployments else None

        final = await wait_for(handled, timeout=120, interval=0.05, what="every mail handled")
        after = {role: sched(p) for role, p in procs.items()}
        ticked = {role: split_cpu(p) for role, p in procs.items()}
    seen: dict[str, float] = {}
    twice = False
    for subject, at in final:
        if subject != "warm":
            twice |= subject in seen
            seen[subject] = at
    return {
        "mails": mails,
        "rate_per_s": rate,
        "deployments": deployments,
        "post_to_handler": spread([seen[k] - posted[k] for k in posted if k in seen], digits=2),
        "hub_cpu_ms_per_mail": per_mail(before["hub"][0], after["hub"][0], mails),
        "sidecar_cpu_ms_per_mail": per_mail(before["sidecar"][0], after["sidecar"][0], mails),
        "schedstat_per_mail": {role: priced(before[role], after[role], mails) for role in procs},
        "hub_user_sys_ms_per_mail": user_sys(ticks["hub"], ticked["hub"], mails),
        "sidecar_user_sys_ms_per_mail": user_sys(ticks["sidecar"], ticked["sidecar"], mails),
        "idle_cpu_ms_per_s": {role: round(v / idle * 1000, 2) for role, v in idle_cpu.items()},
        "processes_priced": {role: len(p) for role, p in procs.items()},
        "exactly_once": sorted(seen) == sorted(posted) and not twice,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=500, help="mails sent, one POST each")
    parser.add_argument("--rate", type=float, default=50.0, help="mails offered a second")
    parser.add_argument("--deployments", type=int, default=1, help="deployments mailed in turn")
    parser.add_argument(
        "--idle", type=float, default=5.0, help="seconds of nothing to do, priced first"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args()
    if min(args.mails, args.deployments) < 1 or args.rate <= 0 or args.idle <= 0:
        parser.error("--mails, --deployments, --rate and --idle must be positive")
    with scratch_dir("mailrun-lone-", keep=args.keep) as tmp:
        figures = anyio.run(
            bench,
            args.mails,
            args.rate,
            args.deployments,
            tmp,
            args.idle,
            backend_options=loop_options(os.environ),
        )
    for key, value in figures.items() if not args.json else ():
        print(f"{key:<26} {value}")
    if args.json:
        print(json.dumps(figures, indent=2))
    if not figures["exactly_once"]:
        sys.exit("FAILED: a mail was missed or seen twice")


if __name__ == "__main__":
    main()
