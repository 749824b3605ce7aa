"""The reference durable hand-off: the yardstick mailrun's figures are divided by.

    .venv/bin/python bench/mail/reference.py [--messages 20000] [--in-flight 64] [--json]

The least any durable hand-off between two processes over NATS does for each
message: A commits it, sends it to B (a NATS request), B commits it and
replies, A commits the reply. Each side group-commits whatever is waiting,
up to 64 rows a transaction, in SQLite WAL with ``synchronous=FULL`` (as
mailrun's stores), one thread hand-off a transaction; ``--in-flight``
messages at once. No HTTP, no parsing, no actors: what is left is the
storage and the messaging that no design can skip.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from tests.support import NatsServerProcess, wait_for

SUBJECT = "reference.b"
GROUP = 64


class GroupCommit:
    """One SQLite file; every statement handed in while a transaction runs
    goes into the next one (up to ``GROUP``), and each caller returns once
    its statement is committed."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS msg (id INTEGER PRIMARY KEY, state TEXT)")
        self._send, self._receive = anyio.create_memory_object_stream[
            tuple[str, tuple[Any, ...], anyio.Event]
        ](1024)
        self._thread = anyio.CapacityLimiter(1)
        self.transactions = 0

    async def commit(self, sql: str, params: tuple[Any, ...]) -> None:
        done = anyio.Event()
        await self._send.send((sql, params, done))
        await done.wait()

    async def run(self) -> None:
        async for first in self._receive:
            batch = [first]
            while len(batch) < GROUP:
                try:
                    batch.append(self._receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            await anyio.to_thread.run_sync(self._write, batch, limiter=self._thread)
            self.transactions += 1
            for *_, done in batch:
                done.set()

    def _write(self, batch: list[tuple[str, tuple[Any, ...], anyio.Event]]) -> None:
        by_sql: dict[str, list[tuple[Any, ...]]] = {}
        for sql, params, _ in batch:
            by_sql.setdefault(sql, []).append(params)
        self._conn.execute("BEGIN IMMEDIATE")
        for sql, rows in by_sql.items():
            self._conn.executemany(sql, rows)
        self._conn.execute("COMMIT")


async def serve_b(url: str, path: Path) -> None:
    """B: commit each request, then reply to it."""
    store = GroupCommit(path)
    nc = await nats.connect(url, name="reference-b")
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)

        async def handle(msg: Any) -> None:
            await store.commit("INSERT INTO msg (id, state) VALUES (?, 'stored')", (int(msg.data),))
            await msg.respond(b"stored")

        async def take(msg: Any) -> None:
            # A has at most --in-flight requests out: this never grows unbounded.
            tg.start_soon(handle, msg)

        await nc.subscribe(SUBJECT, cb=take)
        await nc.flush()
        print("ready", flush=True)
        await anyio.sleep_forever()


async def hand_off(messages: int, in_flight: int, tmp: Path) -> dict[str, Any]:
    async with NatsServerProcess(log_file=tmp / "nats.log") as server:
        b = await anyio.open_process(
            [sys.executable, __file__, "--serve-b", server.url, str(tmp / "b.db")],
            stdout=subprocess.PIPE,
        )
        try:
            assert b.stdout is not None
            with anyio.fail_after(30):
                assert (await b.stdout.receive()).strip() == b"ready"
            nc = await nats.connect(server.url, name="reference-a")
            store = GroupCommit(tmp / "a.db")
            remaining = iter(range(1, messages + 1))
            done = 0

            async def worker() -> None:
                nonlocal done
                for n in remaining:
                    await store.commit("INSERT INTO msg (id, state) VALUES (?, 'sent')", (n,))
                    reply = await nc.request(SUBJECT, str(n).encode(), timeout=30)
                    assert reply.data == b"stored"
                    await store.commit("UPDATE msg SET state = 'acked' WHERE id = ?", (n,))
                    done += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(store.run)
                began = time.perf_counter()
                async with anyio.create_task_group() as workers:
                    for _ in range(in_flight):
                        workers.start_soon(worker)
                took = time.perf_counter() - began
                tg.cancel_scope.cancel()
            await nc.close()
            await wait_for(lambda: done == messages, timeout=1)
        finally:
            b.kill()
            await b.wait()
    return {
        "messages": messages,
        "in_flight": in_flight,
        "per_s": messages / took,
        "rows_per_transaction_a": round(2 * messages / store.transactions, 1),
    }


def measure(messages: int = 20000, in_flight: int = 64) -> dict[str, Any]:
    """One measurement in a scratch dir (bench/suite.py calls this)."""
    with tempfile.TemporaryDirectory(prefix="mailrun-reference-") as tmp:
        return anyio.run(hand_off, messages, in_flight, Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--serve-b", nargs=2, metavar=("URL", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_b:
        anyio.run(serve_b, args.serve_b[0], Path(args.serve_b[1]))
        return
    if args.messages < 1 or args.in_flight < 1:
        parser.error("--messages and --in-flight must be positive")
    figures = measure(args.messages, args.in_flight)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"messages               {figures['messages']}, {figures['in_flight']} in flight")
    print(f"durable hand-offs/s    {figures['per_s']:.0f}")
    print(f"rows per transaction   {figures['rows_per_transaction_a']} (A)")


if __name__ == "__main__":
    main()
