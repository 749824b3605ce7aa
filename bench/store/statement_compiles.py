"""What a statement costs when SQLite compiles it again at every run.

    .venv/bin/python bench/store/statement_compiles.py [--runs 20000]

A hub store in a temporary dir (one deployment, one mail accepted). For the
statements a lone mail's path and the hub's once-a-second reads run on the
dispatch table, the CPU a run (``time.process_time``) and the compilations a
run (the authorizer's calls: SQLite calls it only while it compiles), as
the store declares them (the status written out) and with the status bound
instead (``status = ?``), as they were. The table has a partial index on a
status (``dispatch_parked``): a statement whose bound value could decide
whether that index applies is compiled again whenever it is bound anew.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from hub.store import DispatchStatus, SqliteStore, Trigger, accept_triggers
from hub.store.delivery import sending
from tests.support.harnesses.wire import deploy

RESERVED, DELIVERED = DispatchStatus.RESERVED.value, DispatchStatus.DELIVERED.value


async def prepared(path: Path) -> str:
    """A store at ``path`` with a deployment and a mail accepted; its id."""
    async with await SqliteStore.open(path) as store:
        dep = await deploy(store, "lone")
        trigger = Trigger(address=dep.address, sender="a@b.c", subject="s", body=b"x")
        await store.transact(partial(accept_triggers, triggers=[trigger]))
        return dep.id


def bound(text: str, status: str) -> tuple[str, int]:
    """``text`` with ``status`` bound where it was written out, and how many times."""
    literal = f"status = '{status}'"
    return text.replace(literal, "status = ?"), text.count(literal)


def cases(dep: str) -> list[tuple[str, str, tuple[object, ...], tuple[object, ...]]]:
    """(name, declared text, its parameters, the bound statuses' values in order)."""
    return [
        ("load_reserved", sending._RESERVED.sqlite, (dep, 0, 8), (RESERVED,)),
        ("mark_delivered", sending._DELIVERED.sqlite, (DELIVERED, 0.0, '["x"]'), (RESERVED,)),
        ("count_reserved", sending._RESERVED_COUNTS.sqlite, (), (RESERVED, RESERVED)),
    ]


def price(
    conn: sqlite3.Connection, text: str, params: tuple[object, ...], runs: int
) -> list[float]:
    compiled = [0]

    def authorizer(*_: object) -> int:
        compiled[0] += 1
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorizer)
    conn.execute(text, params).fetchall()  # compiled once, cached by sqlite3
    compiled[0] = 0
    began = time.process_time()
    for _ in range(runs):
        conn.execute(text, params).fetchall()
    spent = time.process_time() - began
    conn.set_authorizer(None)
    return [round(spent / runs * 1e6, 1), round(compiled[0] / runs, 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20000, help="runs of each statement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mailrun-compiles-") as tmp:
        path = Path(tmp) / "hub.db"
        dep = anyio.run(prepared, path)
        conn = sqlite3.connect(path, isolation_level=None)
        print(
            f"{'statement':<16} {'written out: us, compiles a run':>32} {'bound: us, compiles':>22}"
        )
        for name, text, params, statuses in cases(dep):
            as_bound, n = bound(text, statuses[0])
            assert n == len(statuses), (name, n)
            # The statuses go where they were written out (a statement's come together).
            cut = text.index(f"status = '{statuses[0]}'")
            before = text[:cut].count("?")
            bound_params = (*params[:before], *statuses, *params[before:])
            conn.execute("BEGIN")
            out = price(conn, text, params, args.runs)
            was = price(conn, as_bound, bound_params, args.runs)
            conn.execute("ROLLBACK")
            print(f"{name:<16} {out!s:>32} {was!s:>22}")


if __name__ == "__main__":
    main()
