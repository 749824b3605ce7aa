"""Reads in one hop: a statement executes and is exhausted in one call.

The reader connection ``store.db`` is shared by every task that reads. With
aiosqlite each ``execute`` and each ``fetch*`` is a separate call on the
connection's thread, and in SQLite a SELECT's read transaction lasts from its
first step (inside ``execute``) until the statement is reset (its last row
fetched, or its cursor closed). A task that awaits between ``execute`` and
``fetchall`` leaves that read transaction open, and a statement another task
runs meanwhile on the same connection runs inside it: it sees the snapshot
taken at the first task's ``execute`` and misses whatever the writer
committed since, even a commit the second task has already been answered
for (read-your-writes broken, rarely, under load).

:func:`fetch_one` and :func:`fetch_all` use ``execute_fetchall``: the
execute and the fetch run in one call on the connection's thread, so no
other statement runs between them and no read transaction outlives the
call. Reads on ``store.db`` go through them. Reads on the writer, inside a
write transaction, do too: only one task uses the writer at a time, so there
they merely save hops.
"""

from __future__ import annotations

import sqlite3

from runtime import Connection, Params


def is_postgres(db: Connection) -> bool:
    """Whether ``db`` is a PostgreSQL connection (``hub.store.pg``): the few
    statements that lock rows there (SQLite's ``BEGIN IMMEDIATE`` holds the
    whole database) ask."""
    return getattr(db, "dialect", "sqlite") == "postgresql"


async def fetch_all(db: Connection, sql: str, params: Params = ()) -> list[sqlite3.Row]:
    """Every row ``sql`` yields (``sqlite3.Row``, the store's row factory),
    executed and fetched in one call on the connection's thread."""
    return list(await db.execute_fetchall(sql, params))


async def fetch_one(db: Connection, sql: str, params: Params = ()) -> sqlite3.Row | None:
    """The first row ``sql`` yields, or None; like :func:`fetch_all`, in one
    call. Every row is fetched (that is what ends the statement within the
    call), so ``sql`` should yield one row or a few: a key lookup, an
    aggregate, or ``LIMIT 1``."""
    rows = await db.execute_fetchall(sql, params)
    return next(iter(rows), None)
