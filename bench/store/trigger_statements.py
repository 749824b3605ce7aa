"""What a change-feed trigger costs per statement and per row, in SQLite alone.

A table shaped like the hub's dispatch table (its indexes, a change table
fed by an AFTER INSERT and an AFTER UPDATE OF status trigger, as
hub/store/feed/recording.py), filled in transactions of 200 rows: once with
``executemany`` (one statement a row, as the hub wrote before
hub/store/sql/_bulk.py) and once in statements of 32 rows (multi-row ``VALUES``;
``WITH v AS (VALUES ...) UPDATE ... FROM v`` for the update, each row its
own values), and once through the hub's own statements of many rows
(``hub.store.sql``'s ``insert_statement``: declared once for each group size, run by the store's
``SqliteTx``), each with and without the triggers. Prints microseconds per
row, medians of ``--repeat`` runs, after checking that every row was
written and settled and the triggers recorded each change:

    .venv/bin/python bench/store/trigger_statements.py [--rows 30000] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the hub's package

from hub.store.sql import SqliteTx, insert_rows, insert_statement, update_rows, update_statement

SCHEMA = """
CREATE TABLE d (id TEXT PRIMARY KEY, deployment_id TEXT NOT NULL, run_id TEXT NOT NULL,
  seq INTEGER NOT NULL, kind TEXT, message_id TEXT, sender TEXT, subject TEXT, body BLOB,
  status TEXT NOT NULL, created_at REAL, processed_at REAL);
CREATE UNIQUE INDEX d_seq ON d (deployment_id, seq);
CREATE UNIQUE INDEX d_mid ON d (deployment_id, message_id) WHERE message_id IS NOT NULL;
CREATE INDEX d_pend ON d (deployment_id, status, seq);
CREATE INDEX d_run ON d (run_id, seq);
CREATE TABLE change (id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,
  row_id TEXT NOT NULL, deployment_id TEXT NOT NULL, status TEXT, at REAL NOT NULL);
"""
TRIGGERS = """
CREATE TRIGGER d_new AFTER INSERT ON d BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at) VALUES
  ('dispatch', NEW.id, NEW.deployment_id, NEW.status, (julianday('now') - 2440587.5) * 86400.0);
END;
CREATE TRIGGER d_status AFTER UPDATE OF status ON d WHEN NEW.status IS NOT OLD.status BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at) VALUES
  ('dispatch', NEW.id, NEW.deployment_id, NEW.status, (julianday('now') - 2440587.5) * 86400.0);
END;
"""
GROUP = 32
BATCH = 200
MODES = ("executemany", "groups", "declared")
_INSERT = insert_statement(
    "d",
    ("id", "deployment_id", "run_id", "seq", "kind", "message_id", "sender", "subject", "body",
     "status", "created_at", "processed_at"),
)  # fmt: skip
_SETTLE = update_statement(
    (("v_id", "TEXT"), ("v_status", "TEXT"), ("v_at", "DOUBLE PRECISION")),
    "UPDATE d SET status = v.v_status, processed_at = v.v_at FROM v"
    " WHERE id = v.v_id AND status = 'reserved'",
)


def _values(width: int, rows: int) -> str:
    return ", ".join(["(" + ", ".join("?" * width) + ")"] * rows)


def _in_groups(
    db: sqlite3.Connection, statement: Callable[[int], str], rows: Sequence[Sequence[object]]
) -> None:
    """``rows`` in statements of :data:`GROUP`, ``statement(n)`` the SQL for n rows."""
    for at in range(0, len(rows), GROUP):
        part = rows[at : at + GROUP]
        db.execute(statement(len(part)), [v for row in part for v in row])


def one_run(path: str, rows: int, mode: str, triggers: bool) -> tuple[float, float]:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    db = sqlite3.connect(path, isolation_level=None)
    # The hub's settings (runtime/_sqlite.py), but for the fsync: the
    # statements are measured here, not the disk.
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA temp_store = MEMORY")
    db.executescript(SCHEMA + (TRIGGERS if triggers else ""))
    dep, seq, inserting, updating = "dep_" + uuid.uuid4().hex, 0, 0.0, 0.0
    for _ in range(rows // BATCH):
        batch = []
        for _ in range(BATCH):
            seq += 1
            batch.append(
                ("dsp_" + uuid.uuid4().hex, dep, "run_1", seq, "mail", None, "a@b.c",
                 "subject", b"a short body", "reserved", time.time(), None)
            )  # fmt: skip
        settle = [(row[0], "processed", time.time()) for row in batch]
        db.execute("BEGIN IMMEDIATE")
        started = time.perf_counter()
        if mode == "declared":
            insert_rows(SqliteTx(db), _INSERT, batch)
        elif mode == "groups":
            _in_groups(db, lambda n: f"INSERT INTO d VALUES {_values(12, n)}", batch)
        else:
            db.executemany(f"INSERT INTO d VALUES {_values(12, 1)}", batch)
        inserting += time.perf_counter() - started
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        started = time.perf_counter()
        if mode == "declared":
            update_rows(SqliteTx(db), _SETTLE, settle)
        elif mode == "groups":
            _in_groups(
                db,
                lambda n: (
                    f"WITH v(v_id, v_status, v_at) AS (VALUES {_values(3, n)}) UPDATE d"
                    " SET status = v.v_status, processed_at = v.v_at FROM v"
                    " WHERE id = v.v_id AND status = 'reserved'"
                ),
                settle,
            )
        else:
            db.executemany(
                "UPDATE d SET status = ?, processed_at = ? WHERE id = ? AND status = 'reserved'",
                [(status, at, id_) for id_, status, at in settle],
            )
        updating += time.perf_counter() - started
        db.execute("COMMIT")
    done = rows // BATCH * BATCH
    (settled,) = db.execute("SELECT count(*) FROM d WHERE status = 'processed'").fetchone()
    (changes,) = db.execute("SELECT count(*) FROM change").fetchone()
    db.close()
    if (settled, changes) != (done, 2 * done if triggers else 0):
        raise SystemExit(f"lost writes: {settled} settled, {changes} changes of {done} rows")
    return 1e6 * inserting / done, 1e6 * updating / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    cases = [(m, t) for m in MODES for t in (False, True)]
    figures: dict[tuple[str, bool], list[tuple[float, float]]] = {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as home:
        for _ in range(args.repeat):  # in turn, so a slow moment touches every case
            for case in cases:
                figures[case].append(one_run(os.path.join(home, "t.db"), args.rows, *case))
    table = [
        {
            "statements": {"groups": f"groups of {GROUP}", "declared": "hub.store.sql"}.get(
                mode, mode
            ),
            "triggers": triggers,
            "insert_us": statistics.median(r[0] for r in runs),
            "update_us": statistics.median(r[1] for r in runs),
        }
        for (mode, triggers), runs in figures.items()
    ]
    if args.json:
        print(json.dumps({"rows": args.rows, "repeat": args.repeat, "cases": table}, indent=2))
        return
    print(f"{args.rows} rows, transactions of {BATCH}, medians of {args.repeat} runs (us a row)")
    for row in table:
        with_ = "with triggers" if row["triggers"] else "no triggers"
        print(
            f"{row['statements']:<14} {with_:<14}"
            f" insert {row['insert_us']:5.2f}   update {row['update_us']:5.2f}"
        )


if __name__ == "__main__":
    main()
