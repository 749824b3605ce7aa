"""Writes of many rows as a few statements, for tables with change triggers.

``executemany`` runs its statement once per row. On a table with a trigger
(the change feed's, :mod:`hub.store.changes`) every execution also opens a
statement journal and sets up the trigger's program, and that costs about
as much as the row itself: on a table shaped like the dispatch table, an
insert takes 7.8 µs a row one statement a row and 4.7-4.9 in statements of
32, an update 4.9 against 2.6-2.8 (``bench/trigger_statements.py``;
docs/performance.md, "Triggers and statements"). The triggers stay (every
write path records its changes); the hot paths write rows in groups.

Groups are of :data:`GROUP` rows, the rest in halves of that (16, 8, 4,
2, 1), so each statement has at most six shapes in a connection's statement
cache (sqlite3 keeps 128 a connection), not one per batch size: a statement
prepared anew for every batch would cost what grouping saves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from runtime import Connection

GROUP = 32
"""Rows per statement: past this the gain flattens, and a statement of 32
rows of 16 columns is far below SQLite's limit on parameters."""

Row = Sequence[object]


def _groups(rows: Sequence[Row]) -> Iterator[Sequence[Row]]:
    at, size = 0, GROUP
    while at < len(rows):
        while size > len(rows) - at:
            size //= 2
        yield rows[at : at + size]
        at += size


def _values(group: Sequence[Row]) -> str:
    one = "(" + ", ".join("?" * len(group[0])) + ")"
    return ", ".join([one] * len(group))


async def insert_rows(db: Connection, head: str, rows: Sequence[Row]) -> None:
    """``head`` (``INSERT INTO t (a, b)``, any conflict clause included) with
    ``rows`` as multi-row ``VALUES``, :data:`GROUP` rows per statement.

    Within a statement the rows go in as ``executemany`` would put them, in
    order; a constraint failure fails the whole statement (the caller's
    SAVEPOINT is what limits the damage, as with ``executemany``)."""
    for group in _groups(rows):
        await db.execute(f"{head} VALUES {_values(group)}", [v for row in group for v in row])


async def update_rows(
    db: Connection, columns: str, update: str, rows: Sequence[Row], params: Row = ()
) -> None:
    """``WITH v({columns}) AS (VALUES ...) {update}``: one ``UPDATE ... FROM
    v`` per :data:`GROUP` rows, ``update`` reading each row's values as
    ``v.<column>`` (names the table has not, or they are ambiguous) and
    taking ``params`` after them. SQLite only (>= 3.33, for ``UPDATE ...
    FROM``): PostgreSQL types ``VALUES`` parameters as text, so there the
    caller keeps its one-row statement."""
    for group in _groups(rows):
        await db.execute(
            f"WITH v({columns}) AS (VALUES {_values(group)}) {update}",
            [*(v for row in group for v in row), *params],
        )
