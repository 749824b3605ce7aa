"""TRANSITIONAL, for code on the older store API (``store.db``, bodies as
coroutines over ``runtime.Connection``) until it moves to ``hub.store.sql``:
reads in one hop, and :func:`run_in`, a new body's function inside an older
body's transaction. Deleted with that API.

Reads in one hop: a statement executes and is exhausted in one call.

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
from typing import Any, TypeVar

import anyio.to_thread

from runtime import Connection, Params

from .sql import TxBody

T = TypeVar("T")


async def run_in(db: Connection, body: TxBody[T]) -> T:
    """``body`` (a plain function of a ``Tx``) inside the transaction an
    older body holds on ``db``: on SQLite at once (its statements run on
    the thread that drives the older body), on PostgreSQL on a worker
    thread, each statement on the loop (``pg/_tx.py``)."""
    tx = getattr(db, "tx", None)
    if tx is not None:
        return body(tx)
    from .pg._tx import PgTx  # asyncpg comes with the "postgres" extra

    raw: Any = getattr(db, "raw")  # noqa: B009 (PgConnection's, not the protocol's)
    return await anyio.to_thread.run_sync(body, PgTx(raw))


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
