"""Every benchmark of docs/performance.md in one run, medians of several.

    .venv/bin/python bench/suite.py [--runs 3] [--quick] [--write docs/performance.md]

Runs each bench script (as an operator would: `mailrun up` and its children
are real processes) ``--runs`` times, in turn, so that a slow moment of the
machine touches every figure alike; prints the median of each figure, its
spread and, where the project has a target, the ratio or bound and whether it
is met. ``--write FILE`` also puts the table, with the command, the machine
and the date, between the file's two markers (BEGIN and END below).
``--quick`` uses small counts: a smoke run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.mail.dbos_peer import NOT_INSTALLED
from hub.cli.progress import Progress

BENCH = Path(__file__).resolve().parent
BEGIN, END = "<!-- bench/suite.py -->", "<!-- end of bench/suite.py -->"


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    quick: list[str]
    optional: str = ""  # how to install what the case needs, if it may be missing


# 20,000 mails from 8 senders; the batch route and the NATS ingress take 100 a request.
_BATCHES = ["mail/bench_e2e.py", "--mails", "20000", "--senders", "8"]
_QUICK_FIFTY = ["--mails", "2000", "--deployments", "5"]

CASES = [
    Case("reference", ["mail/reference.py", "--messages", "20000"], ["--messages", "2000"]),
    Case("single", ["mail/bench_e2e.py", "--mails", "5000", "--senders", "64"], ["--mails", "500"]),
    Case("batch", [*_BATCHES, "--batch", "100"], ["--mails", "2000"]),
    Case("nats", [*_BATCHES, "--nats"], ["--mails", "2000"]),
    Case(
        "fifty",
        ["mail/bench_e2e.py", "--mails", "5000", "--senders", "64", "--deployments", "50"],
        ["--mails", "500", "--deployments", "5"],
    ),
    # Scale to zero as an operator of many rarely mailed deployments sets it
    # on this machine (docs/performance.md, "Many deployments"): 50 awake at
    # most; all 500 asleep before the clock runs.
    Case(
        "five-hundred",
        [
            *("mail/bench_e2e.py", "--mails", "5000", "--senders", "64", "--deployments", "500"),
            *("--idle-stop", "5", "--max-awake", "50"),
        ],
        ["--mails", "200", "--deployments", "10", "--max-awake", "3"],
    ),
    Case("fifty-batch", [*_BATCHES, "--batch", "100", "--deployments", "50"], _QUICK_FIFTY),
    Case("fifty-nats", [*_BATCHES, "--nats", "--deployments", "50"], _QUICK_FIFTY),
    Case("open", ["mail/bench_e2e.py", "--mails", "10000", "--rate", "1000"], ["--mails", "1000"]),
    Case("lone", ["mail/lone_mail.py", "--mails", "500"], ["--mails", "100"]),
    Case(
        "lone-fifty",
        ["mail/lone_mail.py", "--mails", "500", "--deployments", "50"],
        ["--mails", "100", "--deployments", "5"],
    ),
    Case(
        "wake",
        ["wakes/wake.py", "--part", "latency", "--deployments", "20"],
        ["--deployments", "3"],
    ),
    Case(
        "storm",
        ["wakes/wake.py", "--part", "storm", "--storm", "100", "--storm-max-awake", "20"],
        ["--storm", "6", "--storm-max-awake", "2"],
    ),
    Case("fan-out-8", ["mail/fan_out.py", "--children", "8"], ["--rounds", "1"]),
    Case("fan-out-64", ["mail/fan_out.py", "--children", "64"], ["--rounds", "1"]),
    Case("kernel", ["parts/actor_kernel.py", "--messages", "100000"], ["--messages", "20000"]),
    Case(
        "restart",
        ["hubs/hub_restart.py", "--restarts", "3", "--deployments", "100", "--pending", "1"],
        ["--restarts", "1", "--deployments", "10"],
    ),
    Case("rss", ["hubs/hub_rss.py", "--deployments", "1000"], ["--deployments", "100"]),
    Case(
        "dbos",
        ["mail/dbos_peer.py", "--workflows", "1500", "--concurrency", "64"],
        ["--workflows", "200"],
        optional="pip install -e '.[bench]'",
    ),
]


@dataclass(frozen=True)
class Figure:
    label: str
    unit: str
    value: Callable[[dict[str, Any]], float]
    target: str = ""
    met: Callable[[float], bool] | None = None
    needs: str = ""  # an optional case: when it did not run, the row says so


def _ratio(case: str) -> Callable[[dict[str, Any]], float]:
    """Processed/s of ``case`` over the reference's, from the same round."""
    return lambda runs: runs[case]["processed_per_s"] / runs["reference"]["per_s"]


FIGURES = [
    Figure("reference durable hand-off", "/s", lambda r: r["reference"]["per_s"]),
    Figure("e2e, single POSTs, 64 senders, 1 deployment", "/s",
           lambda r: r["single"]["processed_per_s"]),
    Figure("  ratio to the reference", "x", _ratio("single"), ">= 0.5",
           lambda v: v >= 0.5),
    Figure("e2e, /mail/batch of 100, 8 senders", "/s", lambda r: r["batch"]["processed_per_s"]),
    Figure("  ratio to the reference", "x", _ratio("batch"), ">= 1.0",
           lambda v: v >= 1.0),
    Figure("e2e, NATS ingress batches of 100, 8 senders", "/s",
           lambda r: r["nats"]["processed_per_s"]),
    Figure("e2e, single POSTs, 50 deployments", "/s", lambda r: r["fifty"]["processed_per_s"]),
    Figure("  ratio to 1 deployment", "x",
           lambda r: r["fifty"]["processed_per_s"] / r["single"]["processed_per_s"], ">= 0.5",
           lambda v: v >= 0.5),
    Figure("e2e, single POSTs, 500 deployments asleep at the start, --max-awake 50", "/s",
           lambda r: r["five-hundred"]["processed_per_s"]),
    Figure("  ratio to 1 deployment", "x",
           lambda r: r["five-hundred"]["processed_per_s"] / r["single"]["processed_per_s"],
           ">= 0.3", lambda v: v >= 0.3),
    Figure("  most sidecars awake at once", "", lambda r: r["five-hundred"]["most_awake"],
           "<= 50", lambda v: v <= 50),
    Figure("e2e, /mail/batch of 100, 50 deployments", "/s",
           lambda r: r["fifty-batch"]["processed_per_s"]),
    Figure("e2e, NATS ingress batches of 100, 50 deployments", "/s",
           lambda r: r["fifty-nats"]["processed_per_s"]),
    Figure("accept p50 at 1,000/s offered", "ms", lambda r: r["open"]["accept_p50_ms"]),
    Figure("accept p99 at 1,000/s offered", "ms", lambda r: r["open"]["accept_p99_ms"],
           "<= 20", lambda v: v <= 20),
    Figure("hub CPU per mail (single POSTs)", "ms",
           lambda r: r["single"]["cpu_ms_per_mail"]["hub"], "<= 0.25", lambda v: v <= 0.25),
    Figure("sidecar CPU per mail (single POSTs)", "ms",
           lambda r: r["single"]["cpu_ms_per_mail"]["sidecar"], "<= 0.12",
           lambda v: v <= 0.12),
    Figure("lone mails at 50/s, 1 deployment: POST to handler p50", "ms",
           lambda r: r["lone"]["post_to_handler"]["p50_ms"], "<= 4", lambda v: v <= 4),
    Figure("  p99", "ms", lambda r: r["lone"]["post_to_handler"]["p99_ms"], "<= 15",
           lambda v: v <= 15),
    Figure("  hub CPU per lone mail", "ms", lambda r: r["lone"]["hub_cpu_ms_per_mail"], "<= 0.6",
           lambda v: v <= 0.6),
    Figure("  sidecar CPU per lone mail", "ms", lambda r: r["lone"]["sidecar_cpu_ms_per_mail"],
           "<= 0.6", lambda v: v <= 0.6),
    Figure("lone mails at 50/s over 50 deployments: p50", "ms",
           lambda r: r["lone-fifty"]["post_to_handler"]["p50_ms"]),
    Figure("  p99", "ms", lambda r: r["lone-fifty"]["post_to_handler"]["p99_ms"]),
    Figure("  hub CPU per lone mail", "ms", lambda r: r["lone-fifty"]["hub_cpu_ms_per_mail"],
           "<= 0.6", lambda v: v <= 0.6),
    Figure("  sidecar CPU per lone mail", "ms",
           lambda r: r["lone-fifty"]["sidecar_cpu_ms_per_mail"], "<= 0.6", lambda v: v <= 0.6),
    Figure("wake of an asleep deployment: POST to handler p50", "ms",
           lambda r: r["wake"]["latency"]["post_to_handler"]["p50_ms"], "<= 400",
           lambda v: v <= 400),
    Figure("  p99", "ms", lambda r: r["wake"]["latency"]["post_to_handler"]["p99_ms"], "<= 1000",
           lambda v: v <= 1000),
    Figure("storm: 100 asleep deployments mailed at once, --max-awake 20: all handled", "s",
           lambda r: r["storm"]["storm"]["all_handled_s"]),
    Figure("  most sidecars awake at once", "", lambda r: r["storm"]["storm"]["most_awake"],
           "<= 20", lambda v: v <= 20),
    Figure("fan-out, 8 children awaiting 1 s", "s", lambda r: r["fan-out-8"]["seconds"],
           "about 1", lambda v: v < 1.5),
    Figure("fan-out, 64 children awaiting 1 s", "s", lambda r: r["fan-out-64"]["seconds"],
           "about 4", lambda v: v < 6),
    Figure("actor ask ping-pong / asyncio.Queue", "x",
           lambda r: r["kernel"]["ping_pong"]["ratio"], ">= 0.7", lambda v: v >= 0.7),
    Figure("actor tell fan-in / asyncio.Queue", "x",
           lambda r: r["kernel"]["fan_in"]["ratio"], ">= 0.5", lambda v: v >= 0.5),
    Figure("hub restart, 100 deployments: all back and processed", "ms",
           lambda r: r["restart"]["processed"]["max"] * 1000, "< 2000",
           lambda v: v < 2000),
    Figure("idle sidecar RSS", "MiB", lambda r: r["single"]["idle_sidecar_rss_mib"], "<= 40",
           lambda v: v <= 40),
    Figure("hub RSS with 1,000 deployments", "MiB", lambda r: r["rss"]["hub_rss_after_mib"],
           "<= 200", lambda v: v <= 200),
    Figure("DBOS Transact on SQLite, trivial workflows", "/s",
           lambda r: r["dbos"]["workflows_per_s"], needs="dbos"),
    Figure("e2e single POSTs / DBOS", "x",
           lambda r: r["single"]["processed_per_s"] / r["dbos"]["workflows_per_s"], ">= 10",
           lambda v: v >= 10, needs="dbos"),
]  # fmt: skip


def run_case(case: Case, quick: bool) -> dict[str, Any] | None:
    """The case's figures, or None when it is optional and not installed."""
    argv = [sys.executable, str(BENCH / case.argv[0]), *case.argv[1:], "--json"]
    if quick:
        argv += case.quick
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if case.optional and out.returncode == NOT_INSTALLED:
        return None
    try:
        # A bench that measured but missed its own bound (hub_restart.py
        # exits 1 past 2 s) still printed its figures: the table says "no".
        result: dict[str, Any] = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{case.name} failed ({out.returncode}):\n{out.stderr[-4000:]}") from None
    return result


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, {platform.system()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--write", type=Path, help="also write the table as Markdown here")
    args = parser.parse_args()
    rounds: list[dict[str, dict[str, Any] | None]] = []
    with Progress("cases", args.runs * len(CASES), every=0) as progress:
        for n in range(args.runs):
            results = {}
            for case in CASES:
                began = time.monotonic()
                results[case.name] = run_case(case, args.quick)
                took = time.monotonic() - began
                progress.advance_to(progress.done + 1, f"run {n + 1}: {case.name} in {took:.0f} s")
            rounds.append(results)
    lines = ["| figure | median | min - max | target | met |", "|---|---|---|---|---|"]
    install = {case.name: case.optional for case in CASES}
    for f in FIGURES:
        if f.needs and any(r[f.needs] is None for r in rounds):
            lines.append(
                f"| {f.label.strip()} | not installed ({install[f.needs]}) | | {f.target} | |"
            )
            continue
        values = [f.value(r) for r in rounds]
        m = statistics.median(values)
        met = "" if f.met is None else ("yes" if f.met(m) else "no")
        lines.append(
            f"| {f.label.strip()} | {_fmt(m)} {f.unit} | {_fmt(min(values))} - {_fmt(max(values))}"
            f" | {f.target} | {met} |"
        )
    print("\n".join(lines))
    if args.write:
        command = " ".join(["python bench/suite.py", *sys.argv[1:]])
        block = (
            f"Measured {time.strftime('%Y-%m-%d')} on {machine()}, median of"
            f" {args.runs} run(s){' (--quick)' if args.quick else ''}:\n\n"
            f"    {command}\n\n" + "\n".join(lines) + "\n"
        )
        replace_block(args.write, block)


def replace_block(path: Path, block: str) -> None:
    """Put ``block`` between the file's markers, leaving its prose alone."""
    text = path.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(text[:start] + "\n" + block + text[end:])


def _fmt(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.0f}"


if __name__ == "__main__":
    main()
