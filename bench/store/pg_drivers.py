"""Which PostgreSQL driver the hub's store uses: measured, not guessed.

Runs the shape of the hub's busiest write, an accepting transaction (lock
the deployment row, read the top-level run, insert dispatches, bump the
seq), N times through each candidate, with 8 writers at once each on its own
connection (as several hubs would be), against a fresh pgserver database:

- asyncpg, one await per statement on the event loop: what ``hub.store.pg``
  uses;
- psycopg3, synchronous, the whole transaction on a worker thread (one
  hand-off per transaction, as the SQLite store does), and psycopg3 async,
  one await per statement: when psycopg is installed (it is not a
  dependency: ``pip install 'psycopg[binary]'``).

Prints the medians of ``--runs`` runs: transactions per second, and this
process's CPU per transaction (the database server's is not counted).

    .venv/bin/python bench/store/pg_drivers.py [--transactions 4000] [--writers 1 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import asyncpg

_SCHEMA = """
CREATE TABLE dep (id TEXT PRIMARY KEY, next_seq BIGINT NOT NULL);
CREATE TABLE run (id TEXT PRIMARY KEY, dep TEXT NOT NULL);
CREATE TABLE dispatch (id TEXT PRIMARY KEY, dep TEXT NOT NULL, seq BIGINT NOT NULL,
                       body BYTEA, UNIQUE (dep, seq));
"""
_DEPLOYMENTS = 64
_BODY = b"x" * 200


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sync_body(conn: Any, dep: str, n: int) -> None:
    with conn.transaction():
        (seq,) = conn.execute("SELECT next_seq FROM dep WHERE id = %s FOR UPDATE", [dep]).fetchone()  # type: ignore[misc]
        conn.execute("SELECT id FROM run WHERE dep = %s", [dep]).fetchall()
        conn.execute(
            "INSERT INTO dispatch (id, dep, seq, body) VALUES (%s, %s, %s, %s)",
            [f"{dep}-{seq}", dep, seq, _BODY],
        )
        conn.execute("UPDATE dep SET next_seq = %s WHERE id = %s", [seq + 1, dep])


async def _psycopg_thread(url: str, writer: int, count: int) -> None:
    import psycopg

    conn = await anyio.to_thread.run_sync(lambda: psycopg.connect(url, autocommit=True))
    try:
        for n in range(count):
            await anyio.to_thread.run_sync(_sync_body, conn, f"d{(writer + n) % _DEPLOYMENTS}", n)
    finally:
        conn.close()


async def _psycopg_async(url: str, writer: int, count: int) -> None:
    import psycopg

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        for n in range(count):
            dep = f"d{(writer + n) % _DEPLOYMENTS}"
            async with conn.transaction():
                cur = await conn.execute("SELECT next_seq FROM dep WHERE id = %s FOR UPDATE", [dep])
                (seq,) = await cur.fetchone()  # type: ignore[misc]
                await (await conn.execute("SELECT id FROM run WHERE dep = %s", [dep])).fetchall()
                await conn.execute(
                    "INSERT INTO dispatch (id, dep, seq, body) VALUES (%s, %s, %s, %s)",
                    [f"{dep}-{seq}", dep, seq, _BODY],
                )
                await conn.execute("UPDATE dep SET next_seq = %s WHERE id = %s", [seq + 1, dep])
    finally:
        await conn.close()


async def _asyncpg(url: str, writer: int, count: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        for n in range(count):
            dep = f"d{(writer + n) % _DEPLOYMENTS}"
            async with conn.transaction():
                seq = await conn.fetchval("SELECT next_seq FROM dep WHERE id = $1 FOR UPDATE", dep)
                await conn.fetch("SELECT id FROM run WHERE dep = $1", dep)
                await conn.execute(
                    "INSERT INTO dispatch (id, dep, seq, body) VALUES ($1, $2, $3, $4)",
                    f"{dep}-{seq}",
                    dep,
                    seq,
                    _BODY,
                )
                await conn.execute("UPDATE dep SET next_seq = $1 WHERE id = $2", seq + 1, dep)
    finally:
        await conn.close()


Writer = Callable[[str, int, int], Awaitable[None]]


async def _reset(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP TABLE IF EXISTS dispatch, run, dep")
        await conn.execute(_SCHEMA)
        await conn.executemany(
            "INSERT INTO dep VALUES ($1, 1)", [(f"d{i}",) for i in range(_DEPLOYMENTS)]
        )
    finally:
        await conn.close()


async def _measure(url: str, writer: Writer, total: int, writers: int) -> tuple[float, float]:
    await _reset(url)
    each = total // writers
    cpu, start = _cpu(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for w in range(writers):
            tg.start_soon(writer, url, w, each)
    elapsed, used = time.perf_counter() - start, _cpu() - cpu
    done = each * writers
    return done / elapsed, used / done * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=4000)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="mailrun-pgbench-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver  # type: ignore[import-untyped]

        server = pgserver.get_server(directory, cleanup_mode=None)
    url = server.get_uri()
    candidates: list[tuple[str, Writer]] = [("asyncpg, an await per statement", _asyncpg)]
    try:
        import psycopg  # noqa: F401 - not a dependency: the comparison only

        candidates += [
            ("psycopg3 sync, a thread per transaction", _psycopg_thread),
            ("psycopg3 async, an await per statement", _psycopg_async),
        ]
    except ImportError:
        print(
            "psycopg not installed (pip install 'psycopg[binary]'): asyncpg alone", file=sys.stderr
        )
    try:
        for writers in args.writers:
            print(f"{args.transactions} accept-shaped transactions, {writers} writer(s) at once")
            for name, writer in candidates:
                runs = [
                    asyncio.run(_run(url, writer, args.transactions, writers))
                    for _ in range(args.runs)
                ]
                rate = statistics.median(r for r, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                print(f"  {name:45s} {rate:8,.0f} tx/s   {cpu:6.3f} ms CPU/tx")
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


async def _run(url: str, writer: Writer, total: int, writers: int) -> tuple[float, float]:
    return await _measure(url, writer, total, writers)


if __name__ == "__main__":
    main()
