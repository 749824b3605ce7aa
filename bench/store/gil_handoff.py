"""Why the hub's write transactions run on the event loop's thread: one
SQLite transaction timed on a thread of its own, alone and beside a thread
that keeps running Python (as an event loop under load does), and on the
calling thread.

    .venv/bin/python bench/store/gil_handoff.py [--rows 40] [--transactions 50] [--json]

Each transaction inserts ``--rows`` rows with one ``executemany`` into a
WAL database in a temporary dir (``synchronous = NORMAL``: the disk is not
what is measured). sqlite3 gives up the GIL for every step of a statement,
so a thread running a transaction takes the GIL back once a row; beside a
thread that runs Python it waits for each of those (up to the interpreter's
switch interval, 5 ms by default). Prints the median milliseconds a
transaction (docs/performance-notebook.md, "Transactions on the loop").
"""

from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path


def transaction_ms(conn: sqlite3.Connection, rows: int, transactions: int) -> float:
    times: list[float] = []
    for _ in range(transactions):
        batch = [(secrets.token_hex(13), n, "x" * 50) for n in range(rows)]
        began = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)", batch)
        conn.execute("COMMIT")
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def on_a_thread(run: Callable[[], float]) -> float:
    result: list[float] = []
    worker = threading.Thread(target=lambda: result.append(run()))
    worker.start()
    worker.join()
    return result[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--transactions", type=int, default=50)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mailrun-gil-") as tmp:
        conn = sqlite3.connect(Path(tmp) / "t.db", isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER, s TEXT)")

        def run() -> float:
            return transaction_ms(conn, args.rows, args.transactions)

        alone = on_a_thread(run)
        stop = threading.Event()

        def python() -> None:
            while not stop.is_set():
                sum(range(1000))

        busy = threading.Thread(target=python)
        busy.start()
        try:
            beside = on_a_thread(run)
        finally:
            stop.set()
            busy.join()
        here = run()
        conn.close()
    figures = {
        "rows": args.rows,
        "transactions": args.transactions,
        "thread_alone_ms": round(alone, 3),
        "thread_beside_python_ms": round(beside, 3),
        "calling_thread_ms": round(here, 3),
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"one transaction of {args.rows} rows, median of {args.transactions}:")
    print(f"  on a thread, alone                {alone:9.3f} ms")
    print(f"  on a thread, beside Python        {beside:9.3f} ms")
    print(f"  on the calling thread             {here:9.3f} ms")


if __name__ == "__main__":
    main()
