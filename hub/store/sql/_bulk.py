"""Writes of many rows as a few statements, for tables with change triggers.

``executemany`` runs its statement once per row. On a table with a trigger
(the change feed's, :mod:`hub.store.feed`) every execution also opens a
statement journal and sets up the trigger's program, and that costs about
as much as the row itself: on a table shaped like the dispatch table, an
insert takes 7.8 µs a row one statement a row and 4.7-4.9 in statements of
32, an update 4.9 against 2.6-2.8 (``bench/store/trigger_statements.py``;
docs/performance-notebook.md, "Triggers and statements"). The triggers stay (every
write path records its changes); the hot paths write rows in groups.

Groups are of :data:`GROUP` rows, the rest in halves of that (16, 8, 4,
2, 1), so a statement has six shapes, each declared once at import
(:func:`insert_statement`, :func:`update_statement`) on both databases,
and nothing builds SQL while a transaction runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ._statement import Statement, sql
from ._tx import Tx

GROUP = 32
"""Rows per statement: past this the gain flattens, and a statement of 32
rows of 16 columns is far below SQLite's limit on parameters."""

SIZES = (32, 16, 8, 4, 2, 1)
"""The group sizes a statement is declared for: :data:`GROUP` and its halves."""

Row = Sequence[object]


class Grouped:
    """One statement for each group size of :data:`SIZES`."""

    __slots__ = ("_by_size",)

    def __init__(self, by_size: dict[int, Statement]) -> None:
        self._by_size = by_size

    def __getitem__(self, rows: int) -> Statement:
        """The statement for ``rows`` rows."""
        return self._by_size[rows]

    @property
    def statements(self) -> list[Statement]:
        return list(self._by_size.values())


def groups(rows: Sequence[Row]) -> Iterator[Sequence[Row]]:
    """``rows`` in order, :data:`GROUP` a group, the rest in halves (a size
    of :data:`SIZES` each)."""
    at, left = 0, len(rows)
    while left:
        # The largest size of SIZES that fits what is left: a power of two.
        size = GROUP if left >= GROUP else 1 << (left.bit_length() - 1)
        yield rows[at : at + size]
        at, left = at + size, left - size


def _values(marks: Sequence[str], rows: int) -> str:
    one = "(" + ", ".join(marks) + ")"
    return ", ".join([one] * rows)


def insert_statement(table: str, columns: Sequence[str], *, ignore: bool = False) -> Grouped:
    """``INSERT INTO table (columns)`` with multi-row ``VALUES``, for each
    group size. With ``ignore``, a row that breaks a unique constraint is
    skipped: ``INSERT OR IGNORE`` on SQLite (``ON CONFLICT DO NOTHING``, which
    it takes too, costs it nearly twice as much a row), ``ON CONFLICT DO
    NOTHING`` on PostgreSQL. At a module's top level."""
    names = ", ".join(columns)
    sqlite = f"INSERT {'OR IGNORE ' if ignore else ''}INTO {table} ({names})"
    postgres = f"INSERT INTO {table} ({names})"
    tail = " ON CONFLICT DO NOTHING" if ignore else ""
    return Grouped(
        {
            rows: sql(
                f"{sqlite} VALUES {_values(['?'] * len(columns), rows)}",
                postgres=f"{postgres} VALUES {_values(['?'] * len(columns), rows)}{tail}",
            )
            for rows in SIZES
        }
    )


def update_statement(columns: Sequence[tuple[str, str]], update: str) -> Grouped:
    """``update`` for many rows, each row's values the columns of ``v``:
    ``WITH v(a, b) AS (VALUES ...) UPDATE t SET x = v.a FROM v WHERE t.id = v.b
    AND status = ?``, for each group size. At a module's top level.

    ``columns`` are ``(name, type)``, the type PostgreSQL gives the values
    (it would type a ``VALUES`` list's parameters as text); ``update``'s
    ``WHERE`` must match each row to one row of the table, no column of the
    table may share a name with one of ``columns``, and its own ``?`` marks
    come after the rows' values."""
    names = ", ".join(name for name, _ in columns)
    cast = [f"CAST(? AS {kind})" for _, kind in columns]
    return Grouped(
        {
            rows: sql(
                f"WITH v({names}) AS (VALUES {_values(['?'] * len(columns), rows)}) {update}",
                postgres=f"WITH v({names}) AS (VALUES {_values(cast, rows)}) {update}",
            )
            for rows in SIZES
        }
    )


def insert_rows(tx: Tx, statement: Grouped, rows: Sequence[Row]) -> None:
    """``rows`` through ``statement`` (an :func:`insert_statement`),
    :data:`GROUP` rows per statement.

    Within a statement the rows go in as ``executemany`` would put them, in
    order; a constraint failure fails the whole statement (the caller's
    SAVEPOINT is what limits the damage, as with ``executemany``)."""
    for group in groups(rows):
        tx.execute(statement[len(group)], [v for row in group for v in row])


def update_rows(tx: Tx, statement: Grouped, rows: Sequence[Row], params: Row = ()) -> None:
    """``statement`` (an :func:`update_statement`) for each of ``rows``, in
    groups, with ``params`` for its own ``?`` marks."""
    for group in groups(rows):
        tx.execute(statement[len(group)], [*(v for row in group for v in row), *params])
