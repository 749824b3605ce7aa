"""What a `mailrun` process costs before it does its work: the CPU of
`mailrun --help`, of `mailrun up` until its hub answers, and of one CLI call
against that hub, each a real process, as the tests and operators start them.

    .venv/bin/python bench/wakes/cli_start.py [--runs 5] [--code DIR] [--json]

CPU is user + system of the process (and, for `up`, of every process it
started: nats-server, the hub), from the kernel: ``rusage`` of a child that
exited, ``psutil``'s ``cpu_times`` of `up` and its children at the moment
the hub's ``/healthz`` first answers (``hub_ready``: the hub process's
share of it); and the wall time from `up`'s spawn
to that answer, what a test that starts `up` waits. Prints the median and
the minimum of each over ``--runs``, and the load average. ``--code DIR`` runs the
processes from another checkout (its ``.venv``: an earlier commit's worktree,
say), so before and after can be taken in turn (A B A B) on a busy machine.
Every process runs in that checkout's directory: `up` starts its hub and
fork server as ``python -m``, which imports the package of the current
directory before the installed one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def child_cpu(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """User + system CPU of one process run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_cpu(proc: psutil.Process) -> float:
    """CPU of a process and its living descendants, and of the children they reaped."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def hub_cpu(proc: psutil.Process) -> float:
    """CPU of the hub process `up` started (``python -m hub``): its share of ``up_ready``."""
    for p in proc.children(recursive=True):
        try:
            if p.cmdline()[1:3] == ["-m", "hub"]:
                t = p.cpu_times()
                return float(t.user + t.system)
        except psutil.NoSuchProcess:
            continue
    raise SystemExit("`mailrun up` has no hub process")


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def up_and_call(mailrun: str, env: dict[str, str], cwd: Path) -> tuple[float, float, float, float]:
    """CPU of `mailrun up` (and its children) until ready, and of its hub
    alone; CPU of one CLI call; seconds from up's spawn to ready."""
    with tempfile.TemporaryDirectory(prefix="cli-start-") as tmp:
        state, http = Path(tmp) / "state", f"127.0.0.1:{free_port()}"
        url = f"http://{http}"
        spawned = time.monotonic()
        proc = subprocess.Popen(
            [mailrun, "up", "--state-dir", str(state), "--http", http],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not healthy(url):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"`mailrun up` not ready (exit {proc.poll()})")
                time.sleep(0.02)  # the poll of a process we do not own
            waited = time.monotonic() - spawned
            ready = tree_cpu(psutil.Process(proc.pid))
            hub = hub_cpu(psutil.Process(proc.pid))
            call = [
                mailrun,
                "deployments",
                "--hub",
                url,
                "--token-file",
                str(state / "admin-token"),
            ]
            cli = child_cpu(call, env, cwd)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        return ready, hub, cli, waited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout to run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    code = args.code.resolve()
    mailrun = str(code / ".venv" / "bin" / "mailrun")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILRUN_")}
    figures: dict[str, list[float]] = {"help": [], "up_ready": [], "hub_ready": [], "cli_call": []}
    waits: list[float] = []
    load = [os.getloadavg()[0]]
    for _ in range(args.runs):
        figures["help"].append(child_cpu([mailrun, "--help"], env, code))
        ready, hub, cli, waited = up_and_call(mailrun, env, code)
        figures["up_ready"].append(ready)
        figures["hub_ready"].append(hub)
        figures["cli_call"].append(cli)
        waits.append(waited)
    load.append(os.getloadavg()[0])
    result = {name: {"median": statistics.median(v), "min": min(v)} for name, v in figures.items()}
    wall = {"up_ready": {"median": statistics.median(waits), "min": min(waits)}}
    if args.json:
        print(json.dumps({"code": str(args.code), "load": load, "cpu_s": result, "wall_s": wall}))
        return
    print(f"{args.code}  (load {load[0]:.1f} -> {load[1]:.1f}, {args.runs} runs)")
    for name, r in result.items():
        print(f"  {name:<9} CPU median {r['median']:.2f} s, min {r['min']:.2f} s")
    r = wall["up_ready"]
    print(f"  up_ready  wall median {r['median']:.2f} s, min {r['min']:.2f} s (spawn to /healthz)")


if __name__ == "__main__":
    sys.exit(main())
