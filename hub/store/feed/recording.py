"""The change feed: one ``change`` row per change of a dispatch, a run or a
deployment, written by SQLite triggers (``GET /events`` streams it).

Triggers, not Python: every write path (the acceptor, the wire side, a
deletion, a migration tool) records its changes in the transaction that
makes them, without knowing the feed exists, and a rolled-back transaction
leaves no row. A row is a few columns (no copy of the changed row: the
stream reads its current view when it sends); ``status`` is the one field
copied, so a client that catches up sees each step (reserved, delivered,
processed) and not the latest status three times.

Ids come from AUTOINCREMENT: never reused, even after the newest rows are
trimmed, so an id a client holds (``Last-Event-ID``) means the same change
across hub restarts. A migration that rebuilds one of the three tables
drops its triggers with it and must create them again (:func:`add_change_feed`
is idempotent).

Retention keeps the newest ``keep`` rows (:func:`trim_changes`, from the
wire side's maintenance loop), in short transactions.
"""

from __future__ import annotations

import sqlite3
from enum import StrEnum
from functools import partial

import msgspec

from runtime import DeploymentStatus

from ..base import Store
from ..schema import statements
from ..sql import Tx, sql

DEFAULT_CHANGES_KEPT = 100_000
TRIM_CHUNK = 5_000
"""Rows deleted per transaction: the writer lock is held for a few ms each."""


class ChangeKind(StrEnum):
    DISPATCH = "dispatch"
    RUN = "run"
    DEPLOYMENT = "deployment"


class Change(msgspec.Struct, frozen=True):
    id: int
    kind: str
    row_id: str
    deployment_id: str
    status: str | None  # the row's status as this change left it
    at: float


# julianday('now') is fixed for one statement and available on every SQLite
# (unixepoch('subsec') needs 3.42).
_NOW = "(julianday('now') - 2440587.5) * 86400.0"


def _record(kind: ChangeKind, deployment_id: str, status: str) -> str:
    return (
        f"INSERT INTO change (kind, row_id, deployment_id, status, at)"
        f" VALUES ('{kind.value}', NEW.id, {deployment_id}, {status}, {_NOW});"
    )


_DEPLOYMENT_STATUS = (
    f"CASE WHEN NEW.deleted_at IS NULL THEN '{DeploymentStatus.DEPLOYED.value}'"
    f" ELSE '{DeploymentStatus.DELETED.value}' END"
)
_DISPATCH = _record(ChangeKind.DISPATCH, "NEW.deployment_id", "NEW.status")
_RUN = _record(ChangeKind.RUN, "NEW.deployment_id", "NEW.status")
_DEPLOYMENT = _record(ChangeKind.DEPLOYMENT, "NEW.id", _DEPLOYMENT_STATUS)

# UPDATE OF fires whenever a column is named in SET, changed or not (a run's
# every DispatchProcessed sets its state and status): the WHEN clauses keep
# only real changes. Anchor runs stand for their deployment, not a run.
_FEED = f"""
CREATE TABLE IF NOT EXISTS change (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  kind          TEXT NOT NULL,
  row_id        TEXT NOT NULL,
  deployment_id TEXT NOT NULL,
  status        TEXT,
  at            REAL NOT NULL
);
CREATE TRIGGER IF NOT EXISTS change_dispatch_new AFTER INSERT ON workflow_run_dispatch
BEGIN {_DISPATCH} END;
CREATE TRIGGER IF NOT EXISTS change_dispatch_status
AFTER UPDATE OF status ON workflow_run_dispatch WHEN NEW.status IS NOT OLD.status
BEGIN {_DISPATCH} END;
CREATE TRIGGER IF NOT EXISTS change_run_new AFTER INSERT ON workflow_run WHEN NEW.is_anchor = 0
BEGIN {_RUN} END;
CREATE TRIGGER IF NOT EXISTS change_run_status
AFTER UPDATE OF status, result, error ON workflow_run
WHEN NEW.is_anchor = 0 AND (NEW.status IS NOT OLD.status OR NEW.result IS NOT OLD.result
                            OR NEW.error IS NOT OLD.error)
BEGIN {_RUN} END;
CREATE TRIGGER IF NOT EXISTS change_deployment_new AFTER INSERT ON deployment
BEGIN {_DEPLOYMENT} END;
CREATE TRIGGER IF NOT EXISTS change_deployment_status
AFTER UPDATE OF deleted_at, version, rollout_version ON deployment
WHEN NEW.deleted_at IS NOT OLD.deleted_at OR NEW.version IS NOT OLD.version
     OR NEW.rollout_version IS NOT OLD.rollout_version
BEGIN {_DEPLOYMENT} END;
"""


def _feed_statements() -> list[str]:
    # A trigger's body holds ';': split at "END;" for triggers, at ';' before them.
    table, _, triggers = _FEED.partition("CREATE TRIGGER")
    bodies = ("CREATE TRIGGER" + triggers).split("END;")
    return [*statements(table), *(f"{b.strip()} END" for b in bodies if b.strip())]


def add_change_feed(conn: sqlite3.Connection) -> None:
    """Migration 11: the ``change`` table and the triggers that fill it.
    Changes made before it are not in the feed. Idempotent on its own."""
    for statement in _feed_statements():
        conn.execute(statement)


_COLUMNS = "SELECT id, kind, row_id, deployment_id, status, at FROM change"
_AFTER = sql(_COLUMNS + " WHERE id > ? ORDER BY id LIMIT ?")
_BETWEEN = sql(_COLUMNS + " WHERE id > ? AND id <= ? ORDER BY id LIMIT ?")
# The clock that stamps ``change.at`` on each database (_NOW above).
_DATABASE_NOW = sql(f"SELECT {_NOW}", postgres="SELECT extract(epoch FROM clock_timestamp())")
_SETTLED_HORIZON = sql(
    f"SELECT COALESCE(MAX(id), 0) FROM change WHERE at < {_NOW} - ?",
    postgres="SELECT COALESCE(MAX(id), 0) FROM change"
    " WHERE at < extract(epoch FROM clock_timestamp()) - ?",
)
# The highest id given: SQLite's AUTOINCREMENT keeps it in sqlite_sequence,
# PostgreSQL's BIGSERIAL in the column's sequence.
_LAST_ID = sql(
    "SELECT seq FROM sqlite_sequence WHERE name = 'change'",
    postgres="SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM change_id_seq",
)
# Two subqueries: each end of the table is one search, where MIN and MAX
# in one query read every row.
_ENDS = sql("SELECT (SELECT MIN(id) FROM change), (SELECT MAX(id) FROM change)")
_TRIM = sql(
    "DELETE FROM change WHERE id IN (SELECT id FROM change WHERE id <= ? ORDER BY id LIMIT ?)"
)


def read_changes(tx: Tx, after: int, limit: int, *, upto: int | None = None) -> list[Change]:
    """Up to ``limit`` changes with ids above ``after`` (and at most ``upto``),
    oldest first: a range read of the primary key."""
    if upto is None:
        rows = tx.fetch_all(_AFTER, (after, limit))
    else:
        rows = tx.fetch_all(_BETWEEN, (after, upto, limit))
    return [Change(*row) for row in rows]


FEED_HOLD = 5.0
"""A database written through several connections at once (``Store.shared``:
PostgreSQL): how long a reader waits at a gap in the ids (seconds)."""


def settled_changes(changes: list[Change], after: int, now: float, hold: float) -> list[Change]:
    """Of ``changes`` (ids above ``after``, in order), those a reader may pass
    on now: on PostgreSQL a change's id is given when its row is inserted,
    not when its transaction commits, so while a transaction that took a
    lower id is still open, a higher id may already be visible. A reader
    stops at the first gap, unless the change after it was written more
    than ``hold`` seconds ago (``now`` is the database's clock): by then the
    missing id's transaction, which took its id earlier still, rolled back
    (every write transaction is bounded far below that). On SQLite there
    are no gaps: one writer, and a rolled-back id is given again."""
    passed: list[Change] = []
    expected = after + 1
    for change in changes:
        if change.id != expected and now - change.at < hold:
            break
        passed.append(change)
        expected = change.id + 1
    return passed


def database_now(tx: Tx) -> float:
    """The database's clock, which stamps ``change.at``."""
    row = tx.fetch_one(_DATABASE_NOW)
    return float(row[0]) if row is not None else 0.0


def settled_horizon(tx: Tx, hold: float = FEED_HOLD) -> int:
    """An id below which no change can still appear (every one written more
    than ``hold`` ago, or after that), for a reader that starts from now on
    a shared database."""
    row = tx.fetch_one(_SETTLED_HORIZON, (hold,))
    return int(row[0]) if row is not None else 0


def last_change_id(tx: Tx) -> int:
    """The highest id ever given to a change (0: none yet), trimmed or not."""
    row = tx.fetch_one(_LAST_ID)
    return int(row[0]) if row is not None and row[0] is not None else 0


async def feed_start(store: Store) -> int:
    """Where a reader that starts now begins: after the highest id given,
    or on a shared database after :func:`settled_horizon`, not past a change
    still in an open transaction."""
    return await store.read(settled_horizon if store.shared else last_change_id)


def _read_feed(
    tx: Tx, after: int, limit: int, *, hold: float, settle: bool
) -> tuple[list[Change], bool]:
    changes = read_changes(tx, after, limit)
    full = len(changes) == limit
    if settle and changes and changes[-1].id - after != len(changes):
        changes = settled_changes(changes, after, database_now(tx), hold)
        full = full and len(changes) == limit
    return changes, full


async def read_feed(
    store: Store, after: int, limit: int, *, hold: float = FEED_HOLD
) -> tuple[list[Change], bool]:
    """Up to ``limit`` changes after ``after`` that a reader may pass on now
    (on a shared database, :func:`settled_changes`), and whether the read was
    full: more may be waiting. Only a gap in the ids, which SQLite never
    leaves, costs a second query."""
    body = partial(_read_feed, after=after, limit=limit, hold=hold, settle=store.shared)
    return await store.read(body)


def _trim(tx: Tx, cutoff: int, chunk: int) -> int:
    return max(tx.execute(_TRIM, (cutoff, chunk)), 0)


async def trim_changes(store: Store, keep: int, *, chunk: int = TRIM_CHUNK) -> int:
    """Delete all but the newest ``keep`` changes; how many went. Each chunk
    is its own short transaction, so trimming a backlog never holds the
    writer for long."""
    row = await store.read(lambda tx: tx.fetch_one(_ENDS))
    if row is None or row[0] is None:
        return 0
    cutoff = int(row[1]) - max(keep, 0)  # ids have no gaps: rolled-back ones are reused
    if int(row[0]) > cutoff:
        return 0  # within bounds: no write transaction at all
    deleted = 0
    while True:
        gone = await store.transact(partial(_trim, cutoff=cutoff, chunk=chunk))
        deleted += gone
        if gone < chunk:
            return deleted
