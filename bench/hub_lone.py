"""The hub's CPU a lone mail, read from the kernel's scheduler in nanoseconds.

    .venv/bin/python bench/hub_lone.py [--mails 500] [--rate 50] [--deployments 1]
        [--json] [--keep]

The same run as ``bench/lone_mail.py`` (``mailrun up``, ``--deployments``
workflows whose handler appends the mail's subject and ``time.time()`` to a
file, one warm-up mail each, then ``--mails`` single ``POST /mail`` offered
at ``--rate`` a second, round-robin), priced differently: each process's
on-CPU time is the sum of ``/proc/PID/task/*/schedstat``'s first field
(nanoseconds, every thread), where ``psutil`` reads clock ticks of 10 ms; and
the second and third fields give the time its threads waited to run (the
machine's load, felt) and how many times they were put on a CPU (every
wake of the loop or of a worker thread is one). Prints, per mail, the hub's
and the sidecars' CPU, their wait for a CPU and their runs, with the
POST-to-handler latency; exits 1 unless every mail was handled exactly once.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests.support helpers

from bench.bench_e2e import admin_of_up, scratch_dir, spread
from runtime.loops import loop_options
from tests.support import command_words, wait_for

HANDLER = """
import time


async def main(ctx, item):
    with open("handled.log", "a") as log:
        log.write(f"{item.subject} {time.time()}\\n")
"""


def schedstat(pids: list[int]) -> tuple[int, int, int]:
    """On-CPU ns, ns waited for a CPU, and times run, of every thread of ``pids``."""
    cpu = waited = runs = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                fields = (task / "schedstat").read_text().split()
            except OSError:  # a thread that ended meanwhile
                continue
            cpu, waited, runs = cpu + int(fields[0]), waited + int(fields[1]), runs + int(fields[2])
    return cpu, waited, runs


def roles(state: Path) -> dict[str, list[int]]:
    """The hub's and the sidecars' pids of the ``mailrun up`` in ``state``."""
    found: dict[str, list[int]] = {"hub": [], "sidecar": []}
    for proc in psutil.process_iter():
        try:
            argv = command_words(proc)
        except psutil.Error:
            continue
        if not any(str(state) in arg for arg in argv):
            continue
        for role in found:
            if ["-m", role] == argv[1:3] or role in argv[:2]:
                found[role].append(proc.pid)
    return found


def priced(before: tuple[int, ...], after: tuple[int, ...], mails: int) -> dict[str, float]:
    cpu, waited, runs = (b - a for a, b in zip(before, after, strict=True))
    return {
        "cpu_ms": round(cpu / mails / 1e6, 3),
        "waited_ms": round(waited / mails / 1e6, 3),
        "runs": round(runs / mails, 2),
    }


async def bench(mails: int, rate: float, deployments: int, tmp: Path) -> dict[str, Any]:
    async with admin_of_up(tmp) as call:
        addresses = []
        for n in range(deployments):
            status, dep = await call(
                "POST",
                "/workflows/deployments",
                json={"name": f"lone{n}", "source": HANDLER, "entrypoint": "flow:main"},
            )
            assert status == 201, dep
            addresses.append(dep["address"])
        for address in addresses:
            status, sent = await call("POST", "/mail", json={"to": address, "subject": "warm"})
            assert status == 202, sent

        def handled() -> list[tuple[str, float]]:
            lines = []
            for log in (tmp / "state" / "sidecars").glob("*/handled.log"):
                for line in log.read_text().splitlines():
                    subject, at = line.split()
                    lines.append((subject, float(at)))
            return lines

        await wait_for(lambda: len(handled()) >= deployments, timeout=120, what="the warm-up mails")
        pids = roles(tmp / "state")
        assert len(pids["hub"]) == 1 and len(pids["sidecar"]) == deployments, pids
        before = {role: schedstat(p) for role, p in pids.items()}
        posted: dict[str, float] = {}
        start = time.monotonic()
        for i in range(mails):
            await anyio.sleep(max(0.0, start + i / rate - time.monotonic()))
            subject = f"m{i:06d}"
            posted[subject] = time.time()
            mail = {"to": addresses[i % deployments], "subject": subject}
            status, sent = await call("POST", "/mail", json=mail)
            assert status == 202, sent

        def all_handled() -> list[tuple[str, float]] | None:
            lines = handled()
            return lines if len(lines) >= mails + deployments else None

        final = await wait_for(all_handled, timeout=120, what="every mail handled")
        after = {role: schedstat(p) for role, p in pids.items()}
    seen = [(subject, at) for subject, at in final if subject != "warm"]
    at = dict(seen)
    return {
        "mails": mails,
        "rate_per_s": rate,
        "deployments": deployments,
        "load_1m": round(os.getloadavg()[0], 2),
        "post_to_handler": spread([at[k] - posted[k] for k in posted if k in at], digits=2),
        "hub": priced(before["hub"], after["hub"], mails),
        "sidecars": priced(before["sidecar"], after["sidecar"], mails),
        "exactly_once": sorted(at) == sorted(posted) and len(seen) == len(posted),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=500, help="mails sent, one POST each")
    parser.add_argument("--rate", type=float, default=50.0, help="mails offered a second")
    parser.add_argument("--deployments", type=int, default=1, help="deployments mailed in turn")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args()
    if min(args.mails, args.deployments) < 1 or args.rate <= 0:
        parser.error("--mails, --deployments and --rate must be positive")
    with scratch_dir("mailrun-hub-lone-", keep=args.keep) as tmp:
        figures = anyio.run(
            bench,
            args.mails,
            args.rate,
            args.deployments,
            tmp,
            backend_options=loop_options(os.environ),
        )
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:<16} {value}")
    if not figures["exactly_once"]:
        sys.exit("FAILED: a mail was missed or seen twice")


if __name__ == "__main__":
    main()
