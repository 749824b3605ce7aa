"""The hub's resident memory with many deployments.

    .venv/bin/python bench/hubs/hub_rss.py [--deployments 1000] [--json]

Starts nats-server and `mailrun hub` alone (no sidecars: their memory is
each its own process's, see the idle sidecar RSS of bench_e2e.py) on free
loopback ports, deploys ``--deployments`` workflows through the HTTP API,
and prints the hub's RSS before the first and after the last, with the
time the deploys took, and what a listing of every deployment (``GET
/workflows/deployments``), a listing of what changed since a cursor when
nothing did (``?changed_after=``, what ``mailrun up`` asks for every half
second, with the active producers) and a look at the wakes cost then.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.mail.bench_e2e import COUNTER, start_mailrun, stop_up
from tests.support import NatsServerProcess, admit, free_port


async def bench(deployments: int, tmp: Path) -> dict[str, Any]:
    async with NatsServerProcess(log_file=tmp / "nats.log") as nats:
        state, http = tmp / "state", f"127.0.0.1:{free_port()}"
        hub = start_mailrun(
            ["hub", "--state-dir", str(state), "--http", http, "--nats", nats.url],
            tmp / "hub.log",
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://{http}", timeout=30) as client:
                await admit(client, state / "admin-token", timeout=30)
                proc = psutil.Process(hub.pid)
                before = proc.memory_info().rss
                began = time.perf_counter()
                for n in range(deployments):
                    r = await client.post(
                        "/workflows/deployments",
                        json={"name": f"rss{n}", "source": COUNTER, "entrypoint": "flow:main"},
                    )
                    assert r.status_code == 201, r.text
                took = time.perf_counter() - began
                assert (await client.get("/healthz")).status_code == 200
                after = proc.memory_info().rss
                listing = await priced(client, proc, "/workflows/deployments")
                r = await client.get("/workflows/deployments?changed_after=0")
                cursor = r.json()["cursor"]
                changed = await priced(
                    client, proc, f"/workflows/deployments?changed_after={cursor}"
                )
                producers = await priced(client, proc, "/producers?status=active")
                wakes = await priced(client, proc, "/workflows/wakes?wait=0")
        finally:
            await stop_up(hub)
    return {
        "deployments": deployments,
        "hub_rss_before_mib": before / 2**20,
        "hub_rss_after_mib": after / 2**20,
        "deploys_per_s": deployments / took,
        "listing_ms": listing,
        "listing_changed_ms": changed,
        "producers_ms": producers,
        "wakes_ms": wakes,
    }


async def priced(
    client: httpx.AsyncClient, proc: psutil.Process, path: str, times: int = 20
) -> dict[str, float]:
    """``GET path`` ``times`` over: the median wall time and the hub's CPU a call (ms)."""
    walls, cpu = [], 0.0
    for _ in range(times):
        spent, began = sum(proc.cpu_times()[:2]), time.perf_counter()
        r = await client.get(path)
        walls.append((time.perf_counter() - began) * 1000)
        cpu += sum(proc.cpu_times()[:2]) - spent
        assert r.status_code == 200, r.text
    return {"wall": round(sorted(walls)[times // 2], 1), "hub_cpu": round(cpu / times * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.deployments < 1:
        parser.error("--deployments must be positive")
    with tempfile.TemporaryDirectory(prefix="mailrun-hub-rss-") as tmp:
        figures = anyio.run(bench, args.deployments, Path(tmp))
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"deployments           {figures['deployments']} ({figures['deploys_per_s']:.0f}/s)")
    print(
        f"hub RSS before/after  {figures['hub_rss_before_mib']:.1f} /"
        f" {figures['hub_rss_after_mib']:.1f} MiB"
    )
    for name, key in [
        ("listing of all", "listing_ms"),
        ("listing, none changed", "listing_changed_ms"),
        ("active producers", "producers_ms"),
        ("wakes, wait=0", "wakes_ms"),
    ]:
        price = figures[key]
        print(f"{name:<22}{price['wall']} ms ({price['hub_cpu']} ms of the hub's CPU)")


if __name__ == "__main__":
    main()
