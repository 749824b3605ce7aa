"""Moving a hub's SQLite database to PostgreSQL (``mailrun migrate --to URL``).

Every table's rows are copied as they are (ids, seqs, epochs, bodies,
blobs), in one PostgreSQL transaction: the target holds all of it or none.
The target must be empty of hub data (a fresh database, or one only
migrated); the source is read, never changed. Order is kept where reads
depend on it: ``run_event`` and ``outbound_mail`` rows are inserted in
SQLite's rowid order (their ``rowid`` column numbers them on PostgreSQL),
and the change feed keeps its ids, so a client's ``Last-Event-ID`` means the
same change afterwards; the sequences go on after the highest id copied.

The change feed's triggers fire while rows are copied: the feed is emptied
and copied last, so it holds the source's changes only, and its sequence
goes on after the highest id SQLite ever gave (trimmed ones included).
Leases are not copied: the hubs take them afresh.

Stop the hub before moving its database: what it writes during the copy is
not copied. Then start it with ``--database URL``.

The statements are this tool's own, one dialect each (SQLite's reads of
the source, PostgreSQL's sequences of the target), fixed for each table at
import; rows go in through PostgreSQL's ``COPY`` (asyncpg's
``copy_records_to_table``), with no INSERT text at all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..._errors import MigrationError
from .apply import LATEST

# Parents before children (workflow_run references deployment).
TABLES = (
    "deployment",
    "workflow_run",
    "workflow_run_dispatch",
    "blob",
    "run_event",
    "approval",
    "dead_letter",
    "outbound_mail",
    "deployment_version",
    "producer",
    "deployment_sleep",
    "change",
    "timer",
    "schedule",
)
_ORDERED = {"run_event", "outbound_mail", "dead_letter", "change"}  # by rowid / id
_READ = {t: f"SELECT * FROM {t}" + (" ORDER BY rowid" if t in _ORDERED else "") for t in TABLES}
_SEQUENCES = {"dead_letter": "id", "change": "id", "run_event": "rowid", "outbound_mail": "rowid"}
# The sequence goes on after the highest id copied, or given (the feed's).
_SETVAL = {
    table: f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'),"
    f" GREATEST((SELECT MAX({column}) FROM {table}), $1::bigint, 1),"
    f" GREATEST((SELECT MAX({column}) FROM {table}), $1::bigint) > 0)"
    for table, column in _SEQUENCES.items()
}
_CHUNK = 500
_BINARY = {"body", "data", "payload"}  # BYTEA on PostgreSQL


def _as_bytes(row: tuple[Any, ...], binary: list[int]) -> tuple[Any, ...]:
    values = list(row)
    for at in binary:
        if isinstance(values[at], str):
            values[at] = values[at].encode("utf-8")
    return tuple(values)


OnTable = Callable[[str, int], object]
"""``on_table(name, rows)``: a table was copied."""


async def transfer(source: Path, target: Any, on_table: OnTable | None = None) -> dict[str, int]:
    """Copy the hub database at ``source`` (SQLite, at this release's schema)
    into ``target`` (an asyncpg connection to a migrated, empty PostgreSQL
    database); the rows copied per table."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        (version,) = src.execute("SELECT MAX(version) FROM schema_version").fetchone()
        if version != LATEST:
            raise MigrationError(
                f"{source} is at schema version {version}, not {LATEST}: migrate it first"
            )
        counts: dict[str, int] = {}
        async with target.transaction():
            busy = await target.fetchval(
                "SELECT (SELECT COUNT(*) FROM deployment) + (SELECT COUNT(*) FROM workflow_run)"
            )
            if busy:
                raise MigrationError("the target database holds hub data already")
            for table in TABLES:
                counts[table] = await _copy(src, target, table)
                if on_table is not None:
                    on_table(table, counts[table])
        return counts
    finally:
        src.close()


async def _copy(src: sqlite3.Connection, target: Any, table: str) -> int:
    if table == "change":
        await target.execute("DELETE FROM change")  # what the copy's triggers wrote
    cursor = src.execute(_READ[table])
    columns = [d[0] for d in cursor.description]
    # SQLite keeps what it is given: an early release's text in a BLOB column.
    binary = [at for at, name in enumerate(columns) if name in _BINARY]
    copied = 0
    while rows := cursor.fetchmany(_CHUNK):
        if binary:
            rows = [_as_bytes(row, binary) for row in rows]
        await target.copy_records_to_table(table, records=rows, columns=columns)
        copied += len(rows)
    if table in _SETVAL:
        highest = 0
        if table == "change":
            row = src.execute("SELECT seq FROM sqlite_sequence WHERE name = 'change'").fetchone()
            highest = int(row[0]) if row and row[0] is not None else 0
        await target.execute(_SETVAL[table], highest)
    return copied
