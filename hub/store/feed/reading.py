"""The change feed read and trimmed: the changes after an id, where a reader
that starts now begins, and, on a database several hubs write, only the
changes no open transaction can still precede.

Retention keeps the newest ``keep`` rows (:func:`trim_changes`, from the
wire side's maintenance loop), in short transactions.
"""

from __future__ import annotations

from functools import partial

from ..base import Store
from ..sql import Tx, sql
from .recording import NOW, Change

DEFAULT_CHANGES_KEPT = 100_000
TRIM_CHUNK = 5_000
"""Rows deleted per transaction: the writer lock is held for a few ms each."""

_COLUMNS = "SELECT id, kind, row_id, deployment_id, status, at FROM change"
_AFTER = sql(_COLUMNS + " WHERE id > ? ORDER BY id LIMIT ?")
_BETWEEN = sql(_COLUMNS + " WHERE id > ? AND id <= ? ORDER BY id LIMIT ?")
# The clock that stamps ``change.at`` on each database (``recording.NOW``).
_DATABASE_NOW = sql(f"SELECT {NOW}", postgres="SELECT extract(epoch FROM clock_timestamp())")
_SETTLED_HORIZON = sql(
    f"SELECT COALESCE(MAX(id), 0) FROM change WHERE at < {NOW} - ?",
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
