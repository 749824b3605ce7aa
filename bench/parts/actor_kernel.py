"""The actor kernel's mailbox against a bare ``asyncio.Queue``, in one process.

    .venv/bin/python bench/parts/actor_kernel.py [--messages 100000] [--senders 8] [--json]

ping-pong: one caller asks one actor that answers at once (``ActorRef.ask``),
one message at a time, against two tasks that hand each message back and
forth through two ``asyncio.Queue``. fan-in: ``--senders`` tasks ``tell``
one actor (mailbox of 64), against as many producers putting into one
bounded ``asyncio.Queue`` (64) and one consumer. Prints messages/s of each
and the ratio kernel / queue (the targets: ping-pong >= 0.7, fan-in >= 0.5).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runtime.actors import Actor, Supervisor


class _Echo(Actor[int]):
    async def receive(self, message: int) -> int:
        return message


class _Count(Actor[int]):
    def __init__(self, done: anyio.Event, total: int) -> None:
        self.left = total
        self.done = done

    async def receive(self, message: int) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()


async def kernel_ping_pong(n: int) -> None:
    async with Supervisor() as sup:
        ref = await sup.spawn(_Echo, name="echo")
        for i in range(n):
            await ref.ask(i, timeout=10)


async def queue_ping_pong(n: int) -> None:
    there: asyncio.Queue[int] = asyncio.Queue(1)
    back: asyncio.Queue[int] = asyncio.Queue(1)

    async def echo() -> None:
        while True:
            await back.put(await there.get())

    task = asyncio.get_running_loop().create_task(echo())  # the baseline: bare asyncio
    for i in range(n):
        await there.put(i)
        await back.get()
    task.cancel()


async def kernel_fan_in(n: int, senders: int) -> None:
    done = anyio.Event()
    async with Supervisor() as sup:
        ref = await sup.spawn(lambda: _Count(done, n), name="sink", mailbox_size=64)

        async def send(count: int) -> None:
            for i in range(count):
                await ref.tell(i)

        async with anyio.create_task_group() as tg:
            for _ in range(senders):
                tg.start_soon(send, n // senders)
        await done.wait()


async def queue_fan_in(n: int, senders: int) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue(64)

    async def send(count: int) -> None:
        for i in range(count):
            await queue.put(i)

    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(send(n // senders)) for _ in range(senders)]
    for _ in range(n):
        await queue.get()
    await asyncio.gather(*tasks)


def _rate(n: int, run: Callable[[], Awaitable[None]]) -> float:
    async def timed() -> float:
        began = time.perf_counter()
        await run()
        return n / (time.perf_counter() - began)

    return anyio.run(timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n, senders = args.messages, args.senders
    n -= n % senders
    figures: dict[str, Any] = {
        "ping_pong": {
            "kernel": _rate(n, lambda: kernel_ping_pong(n)),
            "queue": _rate(n, lambda: queue_ping_pong(n)),
        },
        "fan_in": {
            "kernel": _rate(n, lambda: kernel_fan_in(n, senders)),
            "queue": _rate(n, lambda: queue_fan_in(n, senders)),
        },
    }
    for pair in figures.values():
        pair["ratio"] = pair["kernel"] / pair["queue"]
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for name, pair in figures.items():
        print(
            f"{name:10} kernel {pair['kernel']:>9.0f}/s   asyncio.Queue {pair['queue']:>9.0f}/s"
            f"   ratio {pair['ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
