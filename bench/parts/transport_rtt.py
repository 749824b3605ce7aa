"""Request/reply round trips over the transport seam: NATS on loopback and in-memory.

    .venv/bin/python bench/parts/transport_rtt.py [--requests 5000] [--concurrency 1 16]
        [--size 256] [--bus nats memory]

Starts an embedded nats-server on a free loopback port, connects a responder
and a requester (two connections, as hub and sidecar are), and runs
``--requests`` requests at each concurrency level; the same against the
in-memory bus. Prints round trips per second, p50/p99 latency and the CPU
of this process (both ends and the bus's client code) per round trip
(``time.process_time``: the figure that load on the machine moves least),
on the loop mailrun's processes run (uvloop unless ``MAILRUN_LOOP=asyncio``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import anyio

from runtime import Subscription, Transport, open_nats
from runtime.loops import loop_options
from runtime.testing import MemoryBus

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from tests.support import NatsServerProcess


async def serve(sub: Subscription) -> None:
    async for msg in sub:
        await msg.respond(msg.data)


async def drive(client: Transport, requests: int, concurrency: int, size: int) -> str:
    payload = b"x" * size
    latencies: list[float] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            await client.request("bench.echo", payload, 5.0)
            latencies.append(time.perf_counter() - started)

    began, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for index in range(concurrency):
            tg.start_soon(worker, requests // concurrency + (index < requests % concurrency))
    elapsed = time.perf_counter() - began
    cpu_us = (time.process_time() - cpu) / requests * 1e6
    latencies.sort()
    p50 = statistics.median(latencies) * 1e6
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1e6
    return (
        f"{requests / elapsed:9.0f} req/s   p50 {p50:7.0f} us   p99 {p99:7.0f} us"
        f"   CPU {cpu_us:6.1f} us a round trip"
    )


async def bench(server: Transport, client: Transport, label: str, args: argparse.Namespace) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve, await server.subscribe("bench.echo"))
        await server.flush()
        await drive(client, min(args.requests, 500), 1, args.size)  # warm-up
        for concurrency in args.concurrency:
            line = await drive(client, args.requests, concurrency, args.size)
            print(f"{label:7} concurrency {concurrency:3}: {line}")
        tg.cancel_scope.cancel()


async def main(args: argparse.Namespace) -> None:
    if "nats" in args.bus:
        await over_nats(args)
    if "memory" in args.bus:
        bus = MemoryBus()
        async with bus.connect("server") as server, bus.connect("client") as client:
            await bench(server, client, "memory", args)


async def over_nats(args: argparse.Namespace) -> None:
    async with (
        NatsServerProcess() as nats,
        open_nats(nats.url, name="bench-server") as server,
        open_nats(nats.url, name="bench-client") as client,
    ):
        await bench(server, client, "nats", args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--size", type=int, default=256, help="payload bytes")
    parser.add_argument(
        "--bus", nargs="+", choices=["nats", "memory"], default=["nats", "memory"], help="buses run"
    )
    arguments = parser.parse_args()
    print(f"{Path(__file__).name}: {arguments.requests} requests of {arguments.size} B")
    anyio.run(main, arguments, backend_options=loop_options(os.environ))
