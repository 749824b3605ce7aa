"""An orderly stop of the hub while a waker holds a long poll of its wakes.

    .venv/bin/python bench/hubs/hub_stop.py [--stops 10] [--json]

Runs nats-server and the hub as separate processes
(``tests/faults/harness/cluster.py``) with the cluster's wake loop, which,
as ``mailrun up`` does, keeps a ``GET /workflows/wakes`` long poll open
against the hub at all times. Each stop is a SIGTERM and the wait for the
hub's exit (then it is started again); the figure is the time from the
signal to the exit. A hub that waits for the poll holds its stop for the
HTTP server's whole grace (2 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.faults helpers

from tests.faults.harness.cluster import running_cluster


async def bench(stops: int) -> list[float]:
    took: list[float] = []
    with tempfile.TemporaryDirectory(prefix="mailrun-hub-stop-") as tmp:
        # idle_stop: the cluster runs its wake loop (no sidecar is started).
        async with running_cluster(Path(tmp), idle_stop=1.0) as cluster:
            for i in range(stops):
                await anyio.sleep(0.3)  # the wake loop's poll is in flight again
                started = time.perf_counter()
                await cluster.hub.stop()
                took.append(time.perf_counter() - started)
                print(f"stop {i + 1}: {took[-1]:.3f} s", file=sys.stderr)
                await cluster.start_hub()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stops", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    took = anyio.run(bench, args.stops)
    figures = {
        "stops": len(took),
        "median_s": round(statistics.median(took), 3),
        "max_s": round(max(took), 3),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"{figures['stops']} orderly hub stops with a wakes poll in flight:"
            f" median {figures['median_s']:.3f} s, max {figures['max_s']:.3f} s"
        )


if __name__ == "__main__":
    main()
