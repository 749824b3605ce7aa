"""End-to-end throughput of a real `mailrun up` (nats-server, hub, sidecar processes).

    .venv/bin/python bench/bench_e2e.py [--mails 5000] [--senders 64] [--batch N]
        [--json] [--synchronous full|normal]

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
request).
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests.support helpers

from runtime import SQLITE_SYNCHRONOUS_ENV
from tests.support import free_port, wait_for

COUNTER = """
async def main(ctx, item):
    ctx.state["count"] = ctx.state.get("count", 0) + 1
"""


def mailrun_argv() -> list[str]:
    script = Path(sys.executable).with_name("mailrun")
    return [str(script)] if script.exists() else [sys.executable, "-m", "hub.cli.main"]


async def stop_up(up: anyio.abc.Process) -> None:
    """SIGTERM ``up`` (it stops its children in order), SIGKILL after 30 s."""
    with anyio.CancelScope(shield=True):
        if up.returncode is None:
            up.send_signal(signal.SIGTERM)
            with anyio.move_on_after(30):
                await up.wait()
        if up.returncode is None:
            up.kill()
            await up.wait()


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


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def cpu_seconds(up_pid: int) -> dict[str, float]:
    """CPU time (user + system) so far of each part, to see where the time goes."""
    parts = {"bench": psutil.Process(), "up": psutil.Process(up_pid)}
    for child in psutil.Process(up_pid).children():
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue
        name = "hub" if "hub" in argv else "sidecar" if "sidecar" in argv else child.name()
        parts[name] = child
    out = {}
    for name, proc in parts.items():
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            out[name] = round(times.user + times.system, 2)
    return out


def sidecar_process(up_pid: int, deployment_id: str) -> psutil.Process | None:
    for child in psutil.Process(up_pid).children():
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue
        if "sidecar" in argv and deployment_id in argv:
            return child
    return None


async def bench(
    mails: int, senders: int, synchronous: str, tmp: Path, batch: int = 0
) -> dict[str, Any]:
    state, http = tmp / "state", f"127.0.0.1:{free_port()}"
    log = (tmp / "up.log").open("wb")
    up = await anyio.open_process(
        [*mailrun_argv(), "up", "--state-dir", str(state), "--http", http],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, SQLITE_SYNCHRONOUS_ENV: synchronous.upper()},
    )
    # aiohttp, not httpx: at 64 requests in flight httpx spends ~6 ms of CPU
    # per request on this machine and becomes the bottleneck being measured.
    connector = aiohttp.TCPConnector(limit=senders)
    try:
        async with aiohttp.ClientSession(
            f"http://{http}", connector=connector, timeout=aiohttp.ClientTimeout(total=60)
        ) as client:
            auth: dict[str, str] = {}  # the admin token's header, once the hub made it

            async def call(method: str, path: str, **kw: Any) -> tuple[int, Any]:
                async with client.request(method, path, headers=auth, **kw) as resp:
                    return resp.status, await resp.json(content_type=None)

            async def healthy() -> bool:
                try:
                    return (await call("GET", "/healthz"))[0] == 200
                except aiohttp.ClientError:
                    return False

            await wait_for(healthy, timeout=30, interval=0.05, what="hub /healthz")
            auth["Authorization"] = f"Bearer {(state / 'admin-token').read_text().strip()}"
            status, dep = await call(
                "POST",
                "/workflows/deployments",
                json={"name": "bench", "source": COUNTER, "entrypoint": "flow:main"},
            )
            assert status == 201, dep

            async def count() -> int:
                _, runs = await call("GET", "/runs", params={"deployment": dep["id"]})
                states = [run.get("state") or {} for run in runs["runs"]]
                return max((int(s.get("count", 0)) for s in states), default=0)

            status, warm = await call(
                "POST", "/mail", json={"to": dep["address"], "subject": "warm-up"}
            )
            assert status == 202, warm
            await wait_for(count, timeout=30, interval=0.05, what="the warm-up mail processed")
            sidecar = sidecar_process(up.pid, dep["id"])
            idle_rss = sidecar.memory_info().rss if sidecar is not None else None

            latencies: list[float] = []
            remaining = mails

            async def sender() -> None:
                nonlocal remaining
                while remaining > 0:
                    take = min(remaining, batch or 1)
                    remaining -= take
                    first = mails - remaining - take + 1
                    batch_mails = [
                        {"to": dep["address"], "subject": f"m{n}", "body": "x"}
                        for n in range(first, first + take)
                    ]
                    started = time.perf_counter()
                    if batch:
                        status, body = await call(
                            "POST", "/mail/batch", json={"mails": batch_mails}
                        )
                        ok = status == 200 and all(
                            r["status"] == "accepted" for r in body["receipts"]
                        )
                    else:
                        status, body = await call("POST", "/mail", json=batch_mails[0])
                        ok = status == 202
                    latencies.append(time.perf_counter() - started)
                    if not ok:
                        raise RuntimeError(f"mail {first}: HTTP {status} {body}")

            began = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(senders):
                    tg.start_soon(sender)
            accepted_in = time.perf_counter() - began

            async def all_processed() -> bool:
                return await count() >= mails + 1

            await wait_for(all_processed, timeout=600, interval=0.05, what="every mail processed")
            processed_in = time.perf_counter() - began
            cpu = cpu_seconds(up.pid)
    finally:
        await stop_up(up)
        log.close()
    latencies.sort()
    return {
        "mails": mails,
        "senders": senders,
        "batch": batch,
        "synchronous": synchronous,
        "accepted_per_s": mails / accepted_in,
        "processed_per_s": mails / processed_in,
        "accept_p50_ms": percentile(latencies, 0.50) * 1000,
        "accept_p99_ms": percentile(latencies, 0.99) * 1000,
        "idle_sidecar_rss_mib": idle_rss / 2**20 if idle_rss is not None else None,
        "cpu_seconds": cpu,
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
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and logs")
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full",
                        help="full: every commit fsynced (mailrun's setting); normal: to"
                             " measure what that costs")  # fmt: skip
    args = parser.parse_args()
    if args.mails < 1 or args.senders < 1 or not 0 <= args.batch <= 500:
        parser.error("--mails and --senders must be positive, --batch from 0 to 500")
    with scratch_dir("mailrun-bench-", keep=args.keep) as tmp:
        figures = anyio.run(bench, args.mails, args.senders, args.synchronous, tmp, args.batch)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    rss = figures["idle_sidecar_rss_mib"]
    per = f", {figures['batch']} per request" if figures["batch"] else ""
    print(
        f"mails                      {figures['mails']} from {figures['senders']} senders"
        f"{per} (synchronous={figures['synchronous']})"
    )
    print(f"accepted triggers/s        {figures['accepted_per_s']:.0f}")
    print(f"processed/s (end to end)   {figures['processed_per_s']:.0f}")
    print(
        f"accept latency p50 / p99   {figures['accept_p50_ms']:.1f} / "
        f"{figures['accept_p99_ms']:.1f} ms"
    )
    print(f"idle sidecar RSS           {f'{rss:.1f} MiB' if rss is not None else 'n/a'}")
    cpu = ", ".join(f"{name} {secs:.1f}" for name, secs in figures["cpu_seconds"].items())
    print(f"CPU seconds                {cpu}")


if __name__ == "__main__":
    main()
