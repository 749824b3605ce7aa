"""TRANSITIONAL: asyncpg connections behind the older ``Connection`` protocol,
for code not yet on ``hub.store.sql`` (``store.db``, ``store.write()``,
bodies as coroutines); deleted with that API, and ``_sql.py`` with it.

Store code awaits ``execute``, ``executemany`` and ``execute_fetchall`` and
reads rows by position and by column name, as it does with SQLite; asyncpg's
``Record`` reads both ways. Each statement is translated once
(``_sql.py``) and prepared once per connection by asyncpg's statement cache.

Errors come out as the store's own, as ``_tx.py``'s do: a constraint
violation is ``StoreConflict``, a lost connection or a timeout
``StoreUnavailable``, each chained to asyncpg's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import asyncpg

from runtime import Params

from ._sql import translate
from ._tx import store_error


@contextmanager
def as_store_errors() -> Iterator[None]:
    """asyncpg's errors as the store's own (``_tx.store_error``)."""
    try:
        yield
    except Exception as exc:
        raise store_error(exc)  # noqa: B904 (its cause is set)


class Result:
    """What ``execute`` returns: the rows it affected (-1: not counted), and its rows."""

    def __init__(self, rowcount: int, rows: list[Any]) -> None:
        self.rowcount = rowcount
        self._rows = rows

    async def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    async def fetchall(self) -> list[Any]:
        return self._rows

    def rows(self) -> list[Any]:
        return self._rows


def _count(status: str) -> int:
    """Rows a command affected, from its status (``UPDATE 3``, ``INSERT 0 1``)."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else -1


class PgConnection:
    """The ``Connection`` protocol on one asyncpg connection (one caller at a
    time: the store's lock, or a transaction's body)."""

    dialect = "postgresql"

    def __init__(self, conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy) -> None:
        self._conn = conn

    @property
    def raw(self) -> asyncpg.Connection | asyncpg.pool.PoolConnectionProxy:
        return self._conn

    async def execute(self, sql: str, parameters: Params = ()) -> Result:
        statement = translate(sql)
        args = statement.args(parameters)
        with as_store_errors():
            if statement.returns_rows:
                rows = await self._conn.fetch(statement.text, *args)
                return Result(len(rows), rows)
            status = await self._conn.execute(statement.text, *args)
        return Result(_count(status), [])

    async def executemany(self, sql: str, parameters: Iterable[Params]) -> Result:
        statement = translate(sql)
        rows = [statement.args(p) for p in parameters]
        if rows:
            with as_store_errors():
                await self._conn.executemany(statement.text, rows)
        return Result(-1, [])

    async def execute_fetchall(self, sql: str, parameters: Params = ()) -> list[Any]:
        return (await self.execute(sql, parameters)).rows()


class PgPool:
    """The ``Connection`` protocol on a pool (the store's reader): each call
    on a connection of its own, several at once."""

    dialect = "postgresql"

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def _one(self) -> AsyncIterator[PgConnection]:
        with as_store_errors():
            async with self._pool.acquire() as conn:
                yield PgConnection(conn)

    async def execute(self, sql: str, parameters: Params = ()) -> Result:
        async with self._one() as conn:
            return await conn.execute(sql, parameters)

    async def executemany(self, sql: str, parameters: Iterable[Params]) -> Result:
        async with self._one() as conn:
            return await conn.executemany(sql, parameters)

    async def execute_fetchall(self, sql: str, parameters: Params = ()) -> list[Any]:
        async with self._one() as conn:
            return await conn.execute_fetchall(sql, parameters)
