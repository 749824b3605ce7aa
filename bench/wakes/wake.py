"""Scale to zero through a real `mailrun up --idle-stop`: how fast an asleep
deployment wakes, how a storm of wakes drains, what many deployments cost.

    .venv/bin/python bench/wakes/wake.py [--part latency|storm|many|all]
        [--deployments 10] [--storm 10] [--storm-max-awake 3]
        [--many 40] [--hour 20] [--many-max-awake 50] [--many-mailed N] [--idle-stop 1]
        [--json]

Each part runs its own `mailrun up` and deploys a workflow whose handler
records ``time.time()`` as it starts, under the mail's subject, in its
run's state (clocks of one machine), and waits until every deployment is
shown ``asleep`` before the clock runs.

- latency: ``--deployments`` asleep deployments mailed one at a time, each
  mail waited for: POST-to-handler latency of a wake (p50, p99, max);
- storm: ``--storm`` asleep deployments mailed within the same second under
  ``--storm-max-awake``: the seconds until every mail was handled, and the
  most sidecar processes awake at once (the process table, sampled);
- many: ``--many`` asleep deployments, each mailed once at a random moment
  of a compressed hour (``--hour`` seconds) under ``--many-max-awake``: the
  most sidecars awake, the hub's largest RSS, the largest of the hub's
  and the sidecars' together and of ``up``'s whole tree (nats-server and
  the fork server too), the handling latency. ``--many-mailed N``
  mails only N of them, chosen at random, in that time (a window of a real
  hour at its own rate: 2,000 deployments mailed hourly are 0.56 mails a
  second, so 667 over a 1,200-second window).

Every part checks that every mail was handled exactly once; the script
exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.mail.bench_e2e import AdminCall, admin_of_up, scratch_dir, spread
from bench.mail.lone_mail import processes, split_cpu
from runtime.loops import loop_options
from tests.support import wait_for

STAMP = """
import os
import time


def born():
    # The process's start (its fork by `up`), as a Unix time: /proc gives it
    # in clock ticks since boot, which CLOCK_BOOTTIME counts too.
    with open("/proc/self/stat") as stat:
        ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
    since = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - since


async def main(ctx, item):
    now = time.time()
    seen = ctx.state.setdefault("seen", {})
    if item.subject in seen:
        ctx.state["twice"] = ctx.state.get("twice", 0) + 1
    seen[item.subject] = now
    ctx.state.setdefault("born", {})[item.subject] = born()
    ctx.state.setdefault("cpu", {})[item.subject] = time.process_time()
"""

PARTS = ("latency", "storm", "many")


class Sampler:
    """The most sidecar processes alive at once, and the hub's largest RSS,
    sampled from the process table every ``interval`` seconds."""

    def __init__(self, state: Path, interval: float = 0.05) -> None:
        self.state = state
        self.interval = interval
        self.most_awake = 0
        self.hub_rss = 0
        self.total_rss = 0  # the hub's and every sidecar's at one sample
        # up's and every process's below it at one sample (RSS: the fork
        # server's pages its sidecars share are counted in each).
        self.tree_rss = 0

    def sample(self) -> None:
        found = processes(self.state)
        self.most_awake = max(self.most_awake, len(found["sidecar"]))
        tree = 0
        for up in ups(self.state):
            with contextlib.suppress(psutil.Error):
                for proc in [up, *up.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        tree += proc.memory_info().rss
        self.tree_rss = max(self.tree_rss, tree)
        total = 0
        for role, procs in found.items():
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    rss = proc.memory_info().rss
                    total += rss
                    if role == "hub":
                        self.hub_rss = max(self.hub_rss, rss)
        self.total_rss = max(self.total_rss, total)

    async def run(self) -> None:
        while True:
            await anyio.to_thread.run_sync(self.sample)
            await anyio.sleep(self.interval)


def ups(state: Path) -> list[psutil.Process]:
    """The ``mailrun up`` process of ``state``."""
    return [
        proc
        for proc in psutil.process_iter(["cmdline"])
        if "up" in (argv := proc.info["cmdline"] or []) and str(state) in argv
    ]


def cpu(procs: list[psutil.Process]) -> float:
    """User and system CPU seconds of ``procs`` together."""
    return sum(split_cpu(procs))


def busy(state: Path) -> dict[str, float]:
    """CPU seconds so far of the hub and of ``up`` itself (not its children)."""
    found = processes(state)
    seconds = {"hub": cpu(found["hub"]), "up": 0.0}
    for proc in ups(state):
        with contextlib.suppress(psutil.Error):
            seconds["up"] += cpu([proc])
    return seconds


async def deploy_asleep(call: AdminCall, count: int, prefix: str) -> list[dict[str, Any]]:
    """``count`` deployments of the stamping workflow, once all are shown asleep."""
    deps = []
    for n in range(count):
        status, dep = await call(
            "POST",
            "/workflows/deployments",
            json={"name": f"{prefix}{n}", "source": STAMP, "entrypoint": "flow:main"},
        )
        assert status == 201, dep
        deps.append(dep)
    ids = {dep["id"] for dep in deps}

    async def asleep() -> bool:
        status, listing = await call("GET", "/workflows/deployments")
        assert status == 200, listing
        shown = {d["id"]: d.get("status") for d in listing.get("deployments", [])}
        return all(shown.get(dep) == "asleep" for dep in ids)

    await wait_for(asleep, timeout=60 + count, interval=0.2, what="every deployment asleep")
    return deps


async def post(call: AdminCall, dep: dict[str, Any], subject: str) -> tuple[str, float]:
    """Mail ``subject`` to ``dep``; its run id and when it was posted."""
    posted = time.time()
    status, sent = await call("POST", "/mail", json={"to": dep["address"], "subject": subject})
    assert status == 202, sent
    return str(sent["run_id"]), posted


async def handled(
    call: AdminCall, runs: dict[str, str], timeout: float
) -> dict[str, dict[str, Any]]:
    """Each run's state once every subject (``runs``: subject -> run id) was seen."""

    async def states() -> dict[str, dict[str, Any]] | None:
        found = {}
        for subject, run_id in runs.items():
            status, run = await call("GET", f"/runs/{run_id}")
            assert status == 200, run
            state = dict(run.get("state") or {})
            if subject not in state.get("seen", {}):
                return None
            found[subject] = state
        return found

    done: dict[str, dict[str, Any]] = await wait_for(
        states, timeout=timeout, interval=0.02, what="every mail handled"
    )
    return done


def welcomes(state: Path) -> dict[str, list[float]]:
    """When each deployment's sidecar was welcomed awake, from the hub's
    change feed in ``state/hub.db`` (its sleep row deleted in the Welcome's
    transaction), read once ``up`` has stopped."""
    uri = f"{(state / 'hub.db').resolve().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        rows = db.execute(
            "SELECT row_id, at FROM change WHERE kind = 'deployment' AND status = 'deployed'"
            " ORDER BY id"
        ).fetchall()
    found: dict[str, list[float]] = {}
    for dep, at in rows:
        found.setdefault(str(dep), []).append(float(at))
    return found


def split(
    states: dict[str, dict[str, Any]],
    posted: dict[str, float],
    deps: dict[str, str],
    woke: dict[str, list[float]],
) -> dict[str, Any]:
    """A wake's latency in its three legs: the POST until ``up`` has spawned
    the sidecar (the hub's accept, its wake list's answer, the fleet's
    start), the spawn until the hub welcomed it (the sidecar's boot, hello,
    the claim), the Welcome until the handler ran (the delivery); and the
    CPU the sidecar had used by then (its boot's share of its wall time
    says how much of the boot waited for a core). The spawn is the
    process's start in clock ticks (10 ms here): it reads up to a tick
    early. ``slowest``: the five slowest wakes, their legs in ms, and when
    each mail was posted (seconds after the first), to tell a leg slow now
    and then from one slow in bursts."""
    first = min(posted.values(), default=0.0)
    wakes: list[dict[str, float]] = []
    legs: dict[str, list[float]] = {
        "post_to_spawn": [],
        "spawn_to_welcome": [],
        "welcome_to_handler": [],
        "sidecar_cpu_to_handler": [],
    }
    for subject, state in states.items():
        handler, born = state["seen"][subject], state.get("born", {}).get(subject)
        welcome = next((at for at in woke.get(deps[subject], []) if at >= posted[subject]), None)
        if born is None or welcome is None or not posted[subject] <= welcome <= handler:
            continue  # not a wake (its sidecar was up already)
        legs["post_to_spawn"].append(born - posted[subject])
        legs["spawn_to_welcome"].append(welcome - born)
        legs["welcome_to_handler"].append(handler - welcome)
        legs["sidecar_cpu_to_handler"].append(state["cpu"][subject])
        wake = {leg: round(values[-1] * 1000, 1) for leg, values in legs.items()}
        wakes.append(wake | {"posted_s": round(posted[subject] - first, 2)})
    wakes.sort(key=lambda w: w["post_to_spawn"] + w["spawn_to_welcome"] + w["welcome_to_handler"])
    figures: dict[str, Any] = {leg: spread(v, digits=1) for leg, v in legs.items() if v}
    return figures | {"slowest": wakes[-5:][::-1]}


def once(states: dict[str, dict[str, Any]]) -> bool:
    """Every subject seen, each by one run, none twice."""
    return all(
        list(state.get("seen", {})) == [subject] and not state.get("twice")
        for subject, state in states.items()
    )


async def latency(tmp: Path, deployments: int, idle_stop: float) -> dict[str, Any]:
    async with admin_of_up(tmp, "--idle-stop", f"{idle_stop:g}") as call:
        deps = await deploy_asleep(call, deployments, "lat")
        delays, states, posted, mailed = [], {}, {}, {}
        for n, dep in enumerate(deps):
            subject = f"wake{n:05d}"
            run_id, posted[subject] = await post(call, dep, subject)
            mailed[subject] = dep["id"]
            state = (await handled(call, {subject: run_id}, timeout=60))[subject]
            states[subject] = state
            delays.append(state["seen"][subject] - posted[subject])
    return {
        "deployments": deployments,
        "post_to_handler": spread(delays, digits=1),
        **split(states, posted, mailed, welcomes(tmp / "state")),
        "exactly_once": once(states),
    }


async def storm(tmp: Path, count: int, max_awake: int, idle_stop: float) -> dict[str, Any]:
    options = ("--idle-stop", f"{idle_stop:g}", "--max-awake", str(max_awake))
    async with admin_of_up(tmp, *options) as call:
        deps = await deploy_asleep(call, count, "storm")
        sampler = Sampler(tmp / "state")
        runs: dict[str, str] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler.run)
            start = time.monotonic()

            async def send(n: int, dep: dict[str, Any]) -> None:
                runs[f"storm{n:05d}"] = (await post(call, dep, f"storm{n:05d}"))[0]

            async with anyio.create_task_group() as senders:
                for n, dep in enumerate(deps):
                    senders.start_soon(send, n, dep)
            sent = time.monotonic() - start
            states = await handled(call, runs, timeout=60 + 5 * count)
            took = time.monotonic() - start
            tg.cancel_scope.cancel()
    return {
        "deployments": count,
        "max_awake": max_awake,
        "sent_within_s": round(sent, 2),
        "all_handled_s": round(took, 2),
        "most_awake": sampler.most_awake,
        "exactly_once": once(states),
    }


async def many(
    tmp: Path, count: int, hour: float, max_awake: int, idle_stop: float, mailed: int | None = None
) -> dict[str, Any]:
    options = ("--idle-stop", f"{idle_stop:g}", "--max-awake", str(max_awake))
    async with admin_of_up(tmp, *options) as call:
        deps = await deploy_asleep(call, count, "many")
        sampler = Sampler(tmp / "state", interval=0.2)
        rng = random.Random(1)
        chosen = rng.sample(range(count), count if mailed is None else min(mailed, count))
        moments = sorted((rng.uniform(0, hour), n) for n in chosen)
        runs: dict[str, str] = {}
        posted: dict[str, float] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler.run)
            start, spent = time.monotonic(), busy(tmp / "state")
            for at, n in moments:
                await anyio.sleep(max(0.0, start + at - time.monotonic()))
                subject = f"many{n:05d}"
                runs[subject], posted[subject] = await post(call, deps[n], subject)
            states = await handled(call, runs, timeout=120 + count)
            took, spent_after = time.monotonic() - start, busy(tmp / "state")
            tg.cancel_scope.cancel()
    delays = [states[s]["seen"][s] - posted[s] for s in runs]
    mailed = {f"many{n:05d}": deps[n]["id"] for _, n in moments}
    return {
        "deployments": count,
        "mailed": len(runs),
        "hour_s": hour,
        "max_awake": max_awake,
        "post_to_handler": spread(delays, digits=1),
        **split(states, posted, mailed, welcomes(tmp / "state")),
        "most_awake": sampler.most_awake,
        # The share of a core each used while the clock ran (the hub's
        # includes the mail; up's is its polls and the sidecars it starts).
        **{
            f"{role}_cpu_share": round((spent_after[role] - spent[role]) / took, 3)
            for role in ("hub", "up")
        },
        "hub_rss_mib": round(sampler.hub_rss / 2**20, 1),
        "most_rss_mib": round(sampler.total_rss / 2**20, 1),
        "tree_rss_mib": round(sampler.tree_rss / 2**20, 1),
        "exactly_once": once(states),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=[*PARTS, "all"], default="all")
    parser.add_argument("--deployments", type=int, default=10, help="latency: deployments")
    parser.add_argument("--storm", type=int, default=10, help="storm: deployments")
    parser.add_argument("--storm-max-awake", type=int, default=3, help="storm: --max-awake")
    parser.add_argument("--many", type=int, default=40, help="many: deployments")
    parser.add_argument("--hour", type=float, default=20.0, help="many: the hour, in seconds")
    parser.add_argument("--many-max-awake", type=int, default=50, help="many: --max-awake")
    parser.add_argument(
        "--many-mailed", type=int, help="many: deployments mailed in the hour (default: all)"
    )
    parser.add_argument("--idle-stop", type=float, default=1.0, help="up's --idle-stop")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dirs and logs")
    args = parser.parse_args()
    counts = (args.deployments, args.storm, args.storm_max_awake, args.many, args.many_max_awake)
    if min(counts) < 1 or args.hour <= 0 or args.idle_stop <= 0:
        parser.error("counts, --hour and --idle-stop must be positive")
    runs: dict[str, Callable[[Path], Any]] = {
        "latency": lambda tmp: latency(tmp, args.deployments, args.idle_stop),
        "storm": lambda tmp: storm(tmp, args.storm, args.storm_max_awake, args.idle_stop),
        "many": lambda tmp: many(
            tmp, args.many, args.hour, args.many_max_awake, args.idle_stop, args.many_mailed
        ),
    }
    figures: dict[str, Any] = {}
    for part in PARTS if args.part == "all" else (args.part,):
        with scratch_dir(f"mailrun-wake-{part}-", keep=args.keep) as tmp:
            figures[part] = anyio.run(runs[part], tmp, backend_options=loop_options(os.environ))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for part, values in figures.items():
            for key, value in values.items():
                print(f"{part + '.' + key:<26} {value}")
    if not all(values["exactly_once"] for values in figures.values()):
        sys.exit("FAILED: a mail was missed or handled twice")


if __name__ == "__main__":
    main()
