"""DBOS Transact on SQLite, trivial durable workflows: the peer of the e2e figures.

    .venv/bin/python bench/mail/dbos_peer.py [--workflows 1500] [--concurrency 64] [--steps 1]
        [--journal wal|delete] [--json]

Needs the ``bench`` extra (``.venv/bin/pip install -e '.[bench]'``); without
``dbos`` it prints one line on stderr and exits with ``NOT_INSTALLED`` (3),
which bench/suite.py reports as "not installed" rather than a failure.

One process, DBOS's system database a SQLite file in a temporary dir: a
workflow of ``--steps`` steps that only return their argument (one by
default: one durable step per mail, as the e2e bench's counting workflow),
one warm-up workflow, then ``--concurrency`` asyncio tasks (64, as many as
the e2e bench's senders) each awaiting one workflow after another until
``--workflows`` have completed. Prints completed workflows/s, the process's
CPU per workflow and, read from DBOS's tables after, the workflows that
succeeded and the step outputs recorded (the warm-up's included).
``--journal wal`` (the default) puts the file in WAL mode before DBOS opens
it, as mailrun's stores are, with SQLite's default ``synchronous=FULL`` in
both: the same fsync per commit. ``--journal delete`` leaves the file as
DBOS creates it (rollback journal).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import closing
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio

NOT_INSTALLED = 3  # bench/suite.py's cue for "not installed", not a failure


def trivial_workflow(steps: int) -> Callable[[int], Awaitable[int]]:
    """Register with DBOS a workflow of ``steps`` steps that do nothing."""
    from dbos import DBOS

    @DBOS.step()
    async def nothing(i: int) -> int:
        return i

    @DBOS.workflow()
    async def trivial(i: int) -> int:
        for _ in range(steps):
            i = await nothing(i)
        return i

    return trivial


async def bench(workflows: int, concurrency: int, steps: int, db: Path) -> dict[str, Any]:
    from dbos import DBOS

    trivial = trivial_workflow(steps)
    DBOS(
        config={
            "name": "mailrun-bench",
            "system_database_url": f"sqlite:///{db}",
            "log_level": "WARNING",
        }
    )
    # In the event loop, so that DBOS runs the workflows' coroutines on it.
    DBOS.launch()
    try:
        assert await trivial(-1) == -1  # migrations, pools and caches warm
        todo: Iterator[int] = iter(range(workflows))

        async def one_after_another() -> None:
            for i in todo:
                assert await trivial(i) == i

        cpu, began = time.process_time(), time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(one_after_another)
        took, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        DBOS.destroy(destroy_registry=True)
    return {
        "workflows": workflows,
        "concurrency": concurrency,
        "steps": steps,
        "seconds": took,
        "workflows_per_s": workflows / took,
        "cpu_ms_per_workflow": cpu * 1000 / workflows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, default=64, help="workflows in flight")
    parser.add_argument("--steps", type=int, default=1, help="steps per workflow")
    parser.add_argument("--journal", choices=["wal", "delete"], default="wal")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if min(args.workflows, args.concurrency) < 1 or args.steps < 0:
        parser.error("--workflows and --concurrency must be positive, --steps not negative")
    try:
        import dbos  # noqa: F401  (here, not at the top: the script runs without it)
    except ImportError:
        print("dbos is not installed: pip install -e '.[bench]'", file=sys.stderr)
        raise SystemExit(NOT_INSTALLED) from None
    with tempfile.TemporaryDirectory(prefix="mailrun-dbos-peer-") as tmp:
        db = Path(tmp) / "dbos.sqlite"
        if args.journal == "wal":
            with closing(sqlite3.connect(db)) as conn:  # WAL mode lasts: it is the file's
                conn.execute("PRAGMA journal_mode=WAL")
        figures = anyio.run(bench, args.workflows, args.concurrency, args.steps, db)
        with closing(sqlite3.connect(db)) as conn:
            figures["journal_mode"] = conn.execute("PRAGMA journal_mode").fetchone()[0]
            # What DBOS recorded, warm-up included: every workflow and step durable.
            (figures["succeeded"],) = conn.execute(
                "SELECT count(*) FROM workflow_status WHERE status = 'SUCCESS'"
            ).fetchone()
            (figures["step_outputs"],) = conn.execute(
                "SELECT count(*) FROM operation_outputs"
            ).fetchone()
    figures["dbos_version"] = version("dbos")
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"DBOS {figures['dbos_version']} on SQLite ({figures['journal_mode']}):"
        f" {figures['workflows']} workflows of {figures['steps']} step(s),"
        f" {figures['concurrency']} in flight"
    )
    print(f"workflows/s          {figures['workflows_per_s']:.0f}")
    print(f"CPU per workflow     {figures['cpu_ms_per_workflow']:.2f} ms")


if __name__ == "__main__":
    main()
