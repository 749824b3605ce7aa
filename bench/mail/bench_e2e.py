"""End-to-end throughput of a real `mailrun up` (nats-server, hub, sidecar processes).

    .venv/bin/python bench/mail/bench_e2e.py [--mails 5000] [--senders 64] [--batch N]
        [--deployments N] [--idle-stop S] [--max-awake N] [--rate R] [--nats] [--json]
        [--synchronous full|normal]

Starts `mailrun up` in a temporary dir on free loopback ports, deploys a
workflow that only counts, sends one warm-up mail (so the sidecar is up and
idle), then drives ``--senders`` concurrent HTTP senders until ``--mails``
mails are accepted, and waits until the run's state shows every one
processed. Prints accepted triggers/s, processed/s end to end, p50/p99
accept latency and the idle sidecar's RSS; stops everything at the end.
``--synchronous normal`` runs the stores without an fsync per commit
(``MAILRUN_SQLITE_SYNCHRONOUS``): what durable acknowledgements cost is the
difference from the default, ``full``. ``--batch N`` sends N mails per
request through ``POST /mail/batch`` (the latency figures are then per
request). ``--deployments N`` spreads the mails over N deployments (one
sidecar each). ``--rate R`` is an open loop: R requests start each second,
answered or not, and a latency counts from when its request was due.
``--nats`` sends through the NATS mail ingress instead of HTTP, as a
producer added for the run (``hub.IngressClient``), in batches of
``--batch`` (100 unless given). ``--idle-stop S`` hands `up` its scale to
zero (``--max-awake N`` with it) and starts the clock only once every
deployment is shown asleep: each mail then finds its deployment asleep or
woken by an earlier one, and the figures add the most sidecars awake at
once and how many were started (the process table, sampled). CPU per mail
counts hub and sidecars (all of them, those that fell asleep and exited
too) from the first mail sent to the last one processed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import msgspec
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.parts._http import Pool
from hub import IngressClient, ingress_mail
from hub.cli.progress import Progress
from hub.up.processes import ChildSpec, spawn
from runtime.config import SQLITE_SYNCHRONOUS_ENV
from runtime.loops import loop_options
from runtime.sidecar_contract import FORK_SERVER_MODULE
from tests.support import command_words, free_port, wait_for

COUNTER = """
async def main(ctx, item):
    ctx.state["count"] = ctx.state.get("count", 0) + 1
"""


def body_of(n: int) -> str:
    """Mail ``n``'s body: each mail its own, as real mail is (bodies alike
    would hide what a distinct digest costs the hub's indexes)."""
    return f"body of mail {n}"


AdminCall = Callable[..., Awaitable[tuple[int, Any]]]
"""``await call(method, path, **aiohttp_options)``: the status and the JSON body."""


async def admin_calls(
    client: aiohttp.ClientSession, state: Path
) -> tuple[AdminCall, dict[str, str]]:
    """Once the hub of ``state`` answers /healthz on ``client``: a call that
    sends its admin token, and that token's header."""
    auth: dict[str, str] = {}  # the admin token's header, once the hub made it

    async def call(method: str, path: str, **kw: Any) -> tuple[int, Any]:
        async with client.request(method, path, headers=auth, **kw) as resp:
            return resp.status, await resp.json(content_type=None)

    async def healthy() -> bool:
        try:
            return (await call("GET", "/healthz"))[0] == 200
        except aiohttp.ClientError:
            return False

    # A loaded machine can take tens of seconds to start the hub.
    await wait_for(healthy, timeout=120, interval=0.05, what="hub /healthz")
    auth["Authorization"] = f"Bearer {(state / 'admin-token').read_text().strip()}"
    return call, auth


def mailrun_argv() -> list[str]:
    script = Path(sys.executable).with_name("mailrun")
    return [str(script)] if script.exists() else [sys.executable, "-m", "hub.cli.main"]


def start_mailrun(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``mailrun ARGS`` (``up`` or ``hub``), its output to ``log``, tied to
    this process's life as ``up`` ties its own children (``PR_SET_PDEATHSIG``):
    a bench killed at a caller's timeout leaves no fleet running behind it,
    eating the CPU of whatever runs next."""
    return spawn(ChildSpec("mailrun", [*mailrun_argv(), *args], log_path=log, env=env))


async def stop_up(up: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``up`` (it stops its children in order), SIGKILL after 30 s."""
    with anyio.CancelScope(shield=True):
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                await anyio.to_thread.run_sync(partial(up.wait, timeout=30))
            except subprocess.TimeoutExpired:
                up.kill()
        await anyio.to_thread.run_sync(up.wait)


@contextlib.asynccontextmanager
async def admin_of_up(tmp: Path, *options: str) -> AsyncIterator[AdminCall]:
    """``mailrun up`` in ``tmp/state`` (its log ``tmp/up.log``) on a free
    port, with ``options`` added, and the admin call to its hub once it
    answers; stopped at the end."""
    state, http = tmp / "state", f"127.0.0.1:{free_port()}"
    up = start_mailrun(["up", "--state-dir", str(state), "--http", http, *options], tmp / "up.log")
    try:
        async with aiohttp.ClientSession(
            f"http://{http}", timeout=aiohttp.ClientTimeout(total=60)
        ) as client:
            call, _ = await admin_calls(client, state)
            yield call
    finally:
        await stop_up(up)


@contextlib.contextmanager
def scratch_dir(prefix: str, *, keep: bool) -> Iterator[Path]:
    """A temporary dir for a bench's state and logs: removed afterwards, or
    kept (and said where) with ``--keep``."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        if keep:
            print(f"state and logs kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def keep_and_json(parser: argparse.ArgumentParser) -> None:
    """The ``--keep`` and ``--json`` options of a bench run in a scratch dir."""
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch dir (logs) and say where"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def run_in_scratch(
    prefix: str,
    bench: Callable[[Path, argparse.Namespace], Awaitable[dict[str, Any]]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """``bench(tmp, args)`` on the products' event loop, in a scratch dir
    (``args.keep``: kept, and said where)."""
    with scratch_dir(prefix, keep=args.keep) as tmp:
        return anyio.run(bench, tmp, args, backend_options=loop_options(os.environ))


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def spread(values: list[float], digits: int = 1) -> dict[str, float]:
    """p50, p99 and max of ``values`` (seconds) in milliseconds."""
    ordered = sorted(values)
    return {
        "p50_ms": round(percentile(ordered, 0.50) * 1000, digits),
        "p99_ms": round(percentile(ordered, 0.99) * 1000, digits),
        "max_ms": round(ordered[-1] * 1000, digits),
    }


def cpu_seconds(up_pid: int) -> dict[str, float]:
    """CPU time (user + system) so far of each part (every sidecar together),
    to see where the time goes. A sidecar that fell asleep has exited: `up`
    reaped it, so its CPU is in `up`'s children's times (its only children
    that exit are sidecars), or, forked, in the fork server's."""
    up = psutil.Process(up_pid)
    reaped = up.cpu_times()
    parts = [("bench", psutil.Process()), ("up", up)]
    out: dict[str, float] = {"sidecar": reaped.children_user + reaped.children_system}
    for child in up.children(recursive=True):
        try:
            argv = command_words(child)
            if FORK_SERVER_MODULE in argv:
                times = child.cpu_times()
                out["sidecar"] += times.children_user + times.children_system
        except psutil.Error:
            continue
        name = "hub" if "hub" in argv else "sidecar" if "sidecar" in argv else child.name()
        name = "fork-server" if FORK_SERVER_MODULE in argv else name
        parts.append((name, child))
    for name, proc in parts:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            out[name] = round(out.get(name, 0.0) + times.user + times.system, 3)
    return out


def sidecar_process(up_pid: int, deployment_id: str) -> psutil.Process | None:
    for child in psutil.Process(up_pid).children(recursive=True):
        try:
            argv = command_words(child)
        except psutil.Error:
            continue
        if "sidecar" in argv and deployment_id in argv:
            return child
    return None


def restores(state: Path) -> int:
    """Sidecar starts so far, as the sidecars' own logs record them: a woken
    life can be shorter than the sampler's round (`up` nudges it to make
    room), so counting processes seen would miss some."""
    logs = (state / "logs").glob("sidecar-*.log")
    return sum(log.read_text(errors="replace").count(" restored (instance ") for log in logs)


class Awake:
    """The sidecar processes of `up` (``up_pid``), sampled from the process
    table every ``interval`` seconds: the most alive at once, and every one
    seen (a woken deployment's is a new process)."""

    def __init__(self, up_pid: int, interval: float = 0.05) -> None:
        self.up_pid = up_pid
        self.interval = interval
        self.most = 0
        self.seen: set[int] = set()

    def sample(self) -> None:
        alive = set()
        for child in psutil.Process(self.up_pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "sidecar" in command_words(child):
                    alive.add(child.pid)
        self.most = max(self.most, len(alive))
        self.seen |= alive

    async def run(self) -> None:
        while True:
            await anyio.to_thread.run_sync(self.sample)
            await anyio.sleep(self.interval)


async def all_asleep(call: AdminCall, ids: set[str]) -> bool:
    """Whether the hub shows every deployment of ``ids`` asleep."""
    status, listing = await call("GET", "/workflows/deployments")
    assert status == 200, listing
    shown = {d["id"]: d.get("status") for d in listing.get("deployments", [])}
    return all(shown.get(dep) == "asleep" for dep in ids)


async def delivery_counts(client: aiohttp.ClientSession, auth: dict[str, str]) -> Counter[str]:
    """The hub's per-deployment delivery counters (``GET /metrics``), summed
    over the deployments: ``delivered`` and ``frames``."""
    async with client.get("/metrics", headers=auth) as resp:
        text = await resp.text()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        name, _, value = line.partition("{")
        if name in ("mailrun_deployment_delivered_total", "mailrun_deployment_frames_total"):
            counts[name.split("_")[2]] += int(float(value.rpartition(" ")[2]))
    return counts


def cpu_per_mail(before: dict[str, float], after: dict[str, float], mails: int) -> dict[str, float]:
    """Milliseconds of CPU per mail of each part over the measured interval."""
    return {
        name: round((after[name] - before.get(name, 0.0)) * 1000 / mails, 3)
        for name in after
        if name in ("hub", "sidecar")
    }


@contextlib.asynccontextmanager
async def nats_producer(call: Any, state: Path) -> AsyncIterator[IngressClient]:
    """A producer added at the hub, connected to its NATS server once `up`
    has admitted its identity (within a poll)."""
    status, added = await call("POST", "/producers", json={"name": "bench"})
    assert status == 201, added
    _, health = await call("GET", "/healthz")

    def admitted() -> bool:
        return added["nats_user"] in (state / "nats.conf").read_text()

    await wait_for(admitted, timeout=60, interval=0.05, what="the producer admitted")
    client = IngressClient.connect(
        health["nats_url"], producer_id=added["id"], seed=added["seed"], timeout=60
    )
    async with client as producer:
        yield producer


async def bench(
    mails: int,
    senders: int,
    synchronous: str,
    tmp: Path,
    batch: int = 0,
    deployments: int = 1,
    rate: float = 0.0,
    nats: bool = False,
    idle_stop: float | None = None,
    max_awake: int | None = None,
) -> dict[str, Any]:
    state, http = tmp / "state", f"127.0.0.1:{free_port()}"
    scale: list[str] = []  # up's scale to zero: its defaults unless asked
    if idle_stop is not None:
        scale += ["--idle-stop", f"{idle_stop:g}"]
    if max_awake is not None:
        scale += ["--max-awake", str(max_awake)]
    up = start_mailrun(
        ["up", "--state-dir", str(state), "--http", http, *scale],
        tmp / "up.log",
        env={**os.environ, SQLITE_SYNCHRONOUS_ENV: synchronous.upper()},
    )
    # aiohttp for setting up and counting; the mails go through bench/parts/_http.py,
    # which spends a fraction of aiohttp's CPU per request (its docstring).
    connector = aiohttp.TCPConnector(limit=8)
    producer = contextlib.AsyncExitStack()  # the NATS ingress client, with --nats
    try:
        async with aiohttp.ClientSession(
            f"http://{http}", connector=connector, timeout=aiohttp.ClientTimeout(total=60)
        ) as client:
            call, auth = await admin_calls(client, state)
            deps = []
            for n in range(deployments):
                status, dep = await call(
                    "POST",
                    "/workflows/deployments",
                    json={"name": f"bench{n}", "source": COUNTER, "entrypoint": "flow:main"},
                )
                assert status == 201, dep
                deps.append(dep)
                # Mailed at once: with --max-awake, a deployment's first boot
                # takes its warm-up before it falls asleep (mailed after all
                # are created, most would need a second boot).
                status, warm = await call(
                    "POST", "/mail", json={"to": dep["address"], "subject": "warm-up"}
                )
                assert status == 202, warm

            async def count() -> int:
                _, runs = await call("GET", "/runs", params={"limit": "1000"})
                states = [run.get("state") or {} for run in runs["runs"]]
                return sum(int(s.get("count", 0)) for s in states)

            async def warm() -> bool:
                return await count() >= deployments

            # Each sidecar's first boot: about 0.3 s of CPU, a few a second
            # on two cores.
            await wait_for(
                warm,
                timeout=120 + deployments,
                interval=0.05,
                what="the warm-up mails processed",
            )
            sidecar = sidecar_process(up.pid, deps[0]["id"])
            idle_rss = sidecar.memory_info().rss if sidecar is not None else None
            sampler = None  # the sidecars awake, sampled while the clock runs
            if idle_stop is not None:
                await wait_for(
                    partial(all_asleep, call, {dep["id"] for dep in deps}),
                    timeout=60 + idle_stop + deployments,
                    interval=0.2,
                    what="every deployment asleep",
                )
                sampler = Awake(up.pid)
                restored_before = restores(state)
            ingress = None
            if nats:
                ingress = await producer.enter_async_context(nats_producer(call, state))

            latencies: list[float] = []
            host, _, port = http.rpartition(":")
            senders_pool = Pool(host, int(port))
            headers = {**auth, "Content-Type": "application/json"}

            async def send(first: int, take: int, started: float) -> None:
                to = deps[first % deployments]["address"]
                if ingress is not None:
                    receipts = await ingress.send(
                        [ingress_mail(to, f"m{n}", body_of(n)) for n in range(first, first + take)]
                    )
                    latencies.append(time.perf_counter() - started)
                    if not all(r.accepted for r in receipts):
                        raise RuntimeError(f"mail {first}: {receipts}")
                    return
                batch_mails = [
                    {"to": to, "subject": f"m{n}", "body": body_of(n)}
                    for n in range(first, first + take)
                ]
                if batch:
                    path, payload = "/mail/batch", {"mails": batch_mails}
                else:
                    path, payload = "/mail", batch_mails[0]
                status, data = await senders_pool.request(
                    "POST", path, msgspec.json.encode(payload), headers
                )
                latencies.append(time.perf_counter() - started)
                body = msgspec.json.decode(data)
                if batch:
                    ok = status == 200 and all(r["status"] == "accepted" for r in body["receipts"])
                else:
                    ok = status == 202
                if not ok:
                    raise RuntimeError(f"mail {first}: HTTP {status} {body}")

            remaining = mails

            async def sender() -> None:
                nonlocal remaining
                while remaining > 0:
                    take = min(remaining, batch or 1)
                    remaining -= take
                    await send(mails - remaining - take + 1, take, time.perf_counter())

            async def open_loop(tg: anyio.abc.TaskGroup) -> None:
                # Each request starts on its schedule, answered or not: a
                # latency counts from when the request was due.
                step, take = (batch or 1) / rate, batch or 1
                due = time.perf_counter()
                for first in range(1, mails + 1, take):
                    await anyio.sleep(max(0.0, due - time.perf_counter()))
                    tg.start_soon(send, first, min(take, mails - first + 1), due)
                    due += step

            frames_before = await delivery_counts(client, auth)
            cpu_before = cpu_seconds(up.pid)
            began = time.perf_counter()
            async with anyio.create_task_group() as sampling:
                if sampler is not None:
                    sampling.start_soon(sampler.run)
                async with anyio.create_task_group() as tg:
                    if rate:
                        await open_loop(tg)
                    else:
                        for _ in range(senders):
                            tg.start_soon(sender)
                accepted_in = time.perf_counter() - began

                with Progress("processed", mails) as progress:

                    async def all_processed() -> bool:
                        done = await count() - deployments
                        progress.advance_to(done)
                        return done >= mails

                    await wait_for(
                        all_processed,
                        timeout=600 + deployments,
                        # Each look lists the runs with their state: some
                        # 5-9 ms of the hub's CPU at 500 deployments, which
                        # every 50 ms took a tenth of the hub's CPU there.
                        interval=0.05 if deployments == 1 else 0.25,
                        what="every mail processed",
                    )
                processed_in = time.perf_counter() - began
                cpu = cpu_seconds(up.pid)
                sampling.cancel_scope.cancel()
            # How many mails a frame carried: over many deployments each
            # sidecar's cycle costs about what a lone mail's does, so this
            # is what their CPU a mail follows (docs/performance-notebook.md).
            frames = await delivery_counts(client, auth)
            frames.subtract(frames_before)
            senders_pool.close()
    finally:
        await producer.aclose()
        await stop_up(up)
    latencies.sort()
    return {
        "mails": mails,
        "senders": senders,
        "batch": batch,
        "nats": nats,
        "deployments": deployments,
        "idle_stop": idle_stop,
        "max_awake": max_awake,
        "most_awake": sampler.most if sampler is not None else None,
        "sidecars_started": restores(state) - restored_before if sampler is not None else None,
        "offered_per_s": rate or None,
        "synchronous": synchronous,
        "accepted_per_s": mails / accepted_in,
        "processed_per_s": mails / processed_in,
        "accept_p50_ms": percentile(latencies, 0.50) * 1000,
        "accept_p99_ms": percentile(latencies, 0.99) * 1000,
        "idle_sidecar_rss_mib": idle_rss / 2**20 if idle_rss is not None else None,
        "cpu_seconds": cpu,
        "cpu_ms_per_mail": cpu_per_mail(cpu_before, cpu, mails),
        "mails_a_frame": frames["delivered"] / frames["frames"] if frames["frames"] else None,
        "up_exit_code": up.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=5000)
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument(
        "--batch",
        type=int,
        default=0,
        help="mails per POST /mail/batch request (0: one POST /mail each)",
    )
    parser.add_argument("--deployments", type=int, default=1,
                        help="deployments the mails are spread over, in turn")  # fmt: skip
    parser.add_argument("--idle-stop", type=float,
                        help="up's --idle-stop; the clock starts once every deployment is"
                             " asleep")  # fmt: skip
    parser.add_argument("--max-awake", type=int,
                        help="up's --max-awake: sidecars at once (with --idle-stop)")  # fmt: skip
    parser.add_argument("--rate", type=float, default=0.0,
                        help="an open loop: requests started per second, answered or not"
                             " (--senders is then ignored)")  # fmt: skip
    parser.add_argument("--nats", action="store_true",
                        help="send through the NATS mail ingress as a producer, in batches of"
                             " --batch (default 100)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and logs")
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full",
                        help="full: every commit fsynced (mailrun's setting); normal: to"
                             " measure what that costs")  # fmt: skip
    args = parser.parse_args()
    if args.mails < 1 or args.senders < 1 or args.deployments < 1 or args.rate < 0:
        parser.error("--mails, --senders and --deployments must be positive, --rate not negative")
    if (args.idle_stop is not None and args.idle_stop <= 0) or (
        args.max_awake is not None and (args.max_awake < 1 or args.idle_stop is None)
    ):
        parser.error("--idle-stop must be positive; --max-awake positive, with --idle-stop")
    if not 0 <= args.batch <= 500:
        parser.error("--batch must be from 0 to 500")
    if args.nats and not args.batch:
        args.batch = 100
    with scratch_dir("mailrun-bench-", keep=args.keep) as tmp:
        figures = anyio.run(
            bench,
            args.mails,
            args.senders,
            args.synchronous,
            tmp,
            args.batch,
            args.deployments,
            args.rate,
            args.nats,
            args.idle_stop,
            args.max_awake,
            # The senders on the loop the hub runs on: a load generator that
            # spends less of the two cores leaves more of them to what it measures.
            backend_options=loop_options(os.environ),
        )
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    rss = figures["idle_sidecar_rss_mib"]
    per = f", {figures['batch']} per request" if figures["batch"] else ""
    per += " over the NATS ingress" if figures["nats"] else ""
    source = (
        f"offered at {figures['offered_per_s']:.0f}/s"
        if figures["offered_per_s"]
        else f"from {figures['senders']} senders"
    )
    print(
        f"mails                      {figures['mails']} {source}{per}, to"
        f" {figures['deployments']} deployment(s) (synchronous={figures['synchronous']})"
    )
    print(f"accepted triggers/s        {figures['accepted_per_s']:.0f}")
    print(f"processed/s (end to end)   {figures['processed_per_s']:.0f}")
    print(
        f"accept latency p50 / p99   {figures['accept_p50_ms']:.1f} / "
        f"{figures['accept_p99_ms']:.1f} ms"
    )
    print(f"idle sidecar RSS           {f'{rss:.1f} MiB' if rss is not None else 'n/a'}")
    if figures["idle_stop"] is not None:
        print(
            f"scale to zero              every deployment asleep at the start (--idle-stop"
            f" {figures['idle_stop']:g}, --max-awake {figures['max_awake'] or 'default'});"
            f" at most {figures['most_awake']} sidecars awake,"
            f" {figures['sidecars_started']} started"
        )
    cpu = ", ".join(f"{name} {secs:.1f}" for name, secs in figures["cpu_seconds"].items())
    print(f"CPU seconds                {cpu}")
    per_mail = ", ".join(f"{name} {ms:.3f}" for name, ms in figures["cpu_ms_per_mail"].items())
    print(f"CPU ms per mail            {per_mail}")
    if figures["mails_a_frame"] is not None:
        print(f"mails a delivery frame     {figures['mails_a_frame']:.1f}")


if __name__ == "__main__":
    main()
