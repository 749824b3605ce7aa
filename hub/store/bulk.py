"""Writes of many rows as a few statements, for tables with change triggers.

``executemany`` runs its statement once per row. On a table with a trigger
(the change feed's, :mod:`hub.store.changes`) every execution also opens a
statement journal and sets up the trigger's program, and that costs about
as much as the row itself: on a table shaped like the dispatch table, an
insert takes 7.8 µs a row one statement a row and 4.7-4.9 in statements of
32, an update 4.9 against 2.6-2.8 (``bench/trigger_statements.py``;
docs/performance-notebook.md, "Triggers and statements"). The triggers stay (every
write path records its changes); the hot paths write rows in groups.

Groups are of :data:`GROUP` rows, the rest in halves of that (16, 8, 4,
2, 1), so each statement has at most six shapes in a connection's statement
cache (sqlite3 keeps 128 a connection), not one per batch size: a statement
prepared anew for every batch would cost what grouping saves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from string import Formatter

from runtime import Connection

from .reads import is_postgres

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
    db: Connection, update: str, columns: Sequence[str], rows: Sequence[Row], params: Row = ()
) -> None:
    """``update`` for each of ``rows``, its values named ``{column}`` in it
    (``UPDATE t SET a = {a} WHERE id = {id} AND status = ?``) and ``params``
    for its ``?`` marks.

    On SQLite, one ``WITH v(...) AS (VALUES ...) UPDATE ... FROM v`` per
    group, ``{column}`` read as ``v.column``: ``update``'s ``WHERE`` must
    match each row to one row of the table, and no column of the table may
    share a name with one of ``columns``. On PostgreSQL, which types the
    parameters of a ``VALUES`` list as text, a statement a row (asyncpg
    pipelines them), ``{column}`` as a parameter."""
    if is_postgres(db):
        names = [name for _, name, _, _ in Formatter().parse(update) if name]
        at = {column: i for i, column in enumerate(columns)}
        one_row = update.format_map({c: "?" for c in columns})
        await db.executemany(one_row, [(*(row[at[n]] for n in names), *params) for row in rows])
        return
    from_v = update.format_map({c: f"v.{c}" for c in columns}).replace(
        " WHERE ", " FROM v WHERE ", 1
    )
    for group in _groups(rows):
        await db.execute(
            f"WITH v({', '.join(columns)}) AS (VALUES {_values(group)}) {from_v}",
            [*(v for row in group for v in row), *params],
        )
