"""Slow clients against a real `mailrun up`: is a normal request still served?

    .venv/bin/python bench/mail/slow_clients.py [--slow 1000] [--requests 50] [--json]

Starts `mailrun up` in a temporary dir on free loopback ports, deploys a
workflow that only counts, then opens ``--slow`` connections that each send
the start of a request head and then one byte every second, for ever (the
"slowloris" attack), or until the hub closes them. While they hold on, it
sends ``--requests`` normal mails one after another (with the admin token)
and times them, then waits (at most ``--drop-timeout`` seconds) until the
hub has closed every slow connection.

Printed: how many slow connections were open at once, the status codes and
p50 / p99 / max latency of the normal requests sent meanwhile, how long the
hub let a slow connection live (its head deadline, HttpLimits.head_timeout),
how many it had not dropped after ``--drop-timeout`` seconds, the hub's RSS
before and during the flood, and how many normal mails were processed. Run
it with more connections than HttpLimits.max_connections (``--slow 2500``)
to see requests past the limit refused with 503 at once until the head
deadline frees the slots.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.mail.bench_e2e import COUNTER, percentile, scratch_dir, start_mailrun, stop_up
from tests.support import admit, free_port, wait_for


def hub_process(up_pid: int) -> psutil.Process | None:
    for child in psutil.Process(up_pid).children():
        with contextlib.suppress(psutil.Error):
            if "hub" in child.cmdline():
                return child
    return None


class Slow:
    """The slow connections and what became of them."""

    def __init__(self) -> None:
        self.connected = 0
        self.open = 0
        self.lifetimes: list[float] = []  # connect to closed by the hub, seconds
        self.refused = 0  # could not even connect

    async def one(self, host: str, port: int) -> None:
        try:
            stream = await anyio.connect_tcp(host, port)
        except OSError:
            self.refused += 1
            return
        started = time.monotonic()
        self.connected += 1
        self.open += 1
        try:
            async with stream:
                await stream.send(b"POST /mail HTTP/1.1\r\nHost: bench\r\n")
                while True:
                    await stream.send(b"X")
                    with anyio.move_on_after(1):
                        if not await stream.receive():
                            break
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass  # the hub closed it
        finally:
            self.open -= 1
        # Not reached when the bench gives up on it (cancelled): only the
        # connections the hub dropped have a lifetime.
        self.lifetimes.append(time.monotonic() - started)


async def bench(slow_count: int, requests: int, drop_timeout: float, tmp: Path) -> dict[str, Any]:
    state, http = tmp / "state", f"127.0.0.1:{free_port()}"
    host, port = http.split(":")
    up = start_mailrun(["up", "--state-dir", str(state), "--http", http], tmp / "up.log")
    try:
        async with httpx.AsyncClient(base_url=f"http://{http}", timeout=30) as client:
            await admit(client, state / "admin-token", timeout=30)
            r = await client.post(
                "/workflows/deployments", json={"name": "bench", "source": COUNTER}
            )
            assert r.status_code == 201, r.text
            dep = r.json()
            hub = hub_process(up.pid)
            rss_before = hub.memory_info().rss if hub is not None else 0

            slow = Slow()
            statuses: Counter[int] = Counter()
            latencies: list[float] = []
            accepted = 0
            async with anyio.create_task_group() as tg:
                for _ in range(slow_count):
                    tg.start_soon(slow.one, host, int(port))
                # Every slow connection made (or refused) before the first request.
                await wait_for(
                    lambda: slow.connected + slow.refused >= slow_count,
                    timeout=60,
                    what="the slow connections to open",
                )
                open_during = slow.open
                rss_during = hub.memory_info().rss if hub is not None else 0
                for n in range(requests):
                    started = time.perf_counter()
                    r = await client.post("/mail", json={"to": dep["address"], "subject": f"{n}"})
                    latencies.append(time.perf_counter() - started)
                    statuses[r.status_code] += 1
                    accepted += r.status_code == 202
                    if r.status_code == 503:
                        await anyio.sleep(0.2)  # past the limit: try again shortly
                # The slow connections end when the hub closes them (or never).
                with anyio.move_on_after(drop_timeout):
                    await wait_for(lambda: slow.open == 0, timeout=drop_timeout + 1)
                still_open = slow.open
                tg.cancel_scope.cancel()

            async def processed() -> bool:
                runs = (await client.get("/runs", params={"deployment": dep["id"]})).json()
                counts = [(run.get("state") or {}).get("count", 0) for run in runs["runs"]]
                return max(counts, default=0) >= accepted

            await wait_for(processed, timeout=60, what="every accepted mail processed")
    finally:
        await stop_up(up)
    latencies.sort()
    lifetimes = sorted(slow.lifetimes) or [float("nan")]
    return {
        "slow_connections": slow_count,
        "slow_open_during_requests": open_during,
        "slow_refused_at_connect": slow.refused,
        "requests": requests,
        "statuses": dict(sorted(statuses.items())),
        "latency_p50_ms": percentile(latencies, 0.50) * 1000,
        "latency_p99_ms": percentile(latencies, 0.99) * 1000,
        "latency_max_ms": latencies[-1] * 1000,
        "slow_lifetime_min_s": lifetimes[0],
        "slow_lifetime_p50_s": percentile(lifetimes, 0.50),
        "slow_lifetime_max_s": lifetimes[-1],
        "slow_still_open": still_open,
        "drop_timeout_s": drop_timeout,
        "hub_rss_before_mib": rss_before / 2**20,
        "hub_rss_during_mib": rss_during / 2**20,
        "accepted_mails_processed": accepted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=1000, help="slow connections")
    parser.add_argument("--requests", type=int, default=50, help="normal requests meanwhile")
    parser.add_argument(
        "--drop-timeout", type=float, default=60.0, help="seconds to wait for the hub to drop them"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args()
    if args.slow < 1 or args.requests < 1:
        parser.error("--slow and --requests must be positive")
    # The client side needs a descriptor per slow connection too.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = args.slow + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        limit = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    with scratch_dir("mailrun-slow-", keep=args.keep) as tmp:
        figures = anyio.run(bench, args.slow, args.requests, args.drop_timeout, tmp)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    f = figures
    print(f"slow connections            {f['slow_connections']} opened,"
          f" {f['slow_open_during_requests']} open while the requests ran,"
          f" {f['slow_refused_at_connect']} refused at connect")  # fmt: skip
    statuses = ", ".join(f"{n} x {code}" for code, n in f["statuses"].items())
    print(f"normal requests meanwhile   {f['requests']}: {statuses}")
    print(f"latency p50 / p99 / max     {f['latency_p50_ms']:.1f} / {f['latency_p99_ms']:.1f}"
          f" / {f['latency_max_ms']:.1f} ms")  # fmt: skip
    print(f"dropped by the hub after    min {f['slow_lifetime_min_s']:.1f} s, p50"
          f" {f['slow_lifetime_p50_s']:.1f} s, max {f['slow_lifetime_max_s']:.1f} s")  # fmt: skip
    print(f"still open after waiting    {f['slow_still_open']}"
          f" (waited {f['drop_timeout_s']:g} s for the hub to drop them)")  # fmt: skip
    print(f"hub RSS before / during     {f['hub_rss_before_mib']:.1f} /"
          f" {f['hub_rss_during_mib']:.1f} MiB")  # fmt: skip
    print(f"accepted mails processed    {f['accepted_mails_processed']}")


if __name__ == "__main__":
    main()
