"""psycopg connections behind the store's ``Connection`` protocol.

Store code awaits ``execute``, ``executemany`` and ``execute_fetchall`` and
reads rows by position and by column name, as it does with SQLite.
:class:`PgDirect` does that on a thread that owns a psycopg connection (a
write transaction's body runs there whole, as on SQLite: one hand-off per
transaction, however many statements); :class:`PgAsync` hands each call to
that thread, for the reader and for :meth:`PgStore.write`.

Client-side binding (``psycopg.ClientCursor``): the parameters are quoted
into the statement, so a ``?`` whose type the server could not infer (``? IS
NULL``) means what it means on SQLite. Errors come out as the DB-API
classes of ``sqlite3`` that store code catches: a unique violation is an
``sqlite3.IntegrityError``, a lost connection an ``sqlite3.OperationalError``,
each chained to psycopg's own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from functools import lru_cache
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.to_thread
import psycopg

from runtime import Params

from ._sql import translate, translate_many

T = TypeVar("T")


class Row(tuple[Any, ...]):
    """A row read by position or by column name (case-insensitive), like
    ``sqlite3.Row``. One subclass per column list carries the names."""

    __slots__ = ()
    _names: ClassVar[tuple[str, ...]] = ()
    _index: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                at = self._index[key.lower()]
            except KeyError:
                raise IndexError(f"no column {key!r}") from None
            return tuple.__getitem__(self, at)
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


@lru_cache(maxsize=2048)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    index = {name.lower(): at for at, name in reversed(list(enumerate(names)))}
    return type("Row", (Row,), {"__slots__": (), "_names": names, "_index": index})


def _rows(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    names = tuple(column.name for column in cursor.description or ())
    return _row_class(names)


@contextmanager
def as_sqlite_errors() -> Iterator[None]:
    """psycopg's errors as the ``sqlite3`` classes store code catches."""
    try:
        yield
    except psycopg.IntegrityError as exc:
        raise sqlite3.IntegrityError(str(exc)) from exc
    except psycopg.OperationalError as exc:
        raise sqlite3.OperationalError(str(exc)) from exc


class Result:
    """What ``execute`` returns: the rows it affected, and its rows."""

    def __init__(self, rowcount: int, rows: list[Row]) -> None:
        self.rowcount = rowcount
        self._rows = rows

    async def fetchone(self) -> Row | None:
        return self._rows[0] if self._rows else None

    async def fetchall(self) -> list[Row]:
        return self._rows

    def rows(self) -> list[Row]:
        return self._rows


class PgDirect:
    """The ``Connection`` protocol on the thread that owns ``conn``: each call
    runs there and then."""

    dialect = "postgresql"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def connection(self) -> psycopg.Connection[Any]:
        return self._conn

    def run(self, sql: str, parameters: Params = ()) -> Result:
        text, reorder = translate(sql)
        with as_sqlite_errors(), self.connection().cursor(row_factory=_rows) as cur:
            cur.execute(text, reorder(parameters))
            rows = cur.fetchall() if cur.description is not None else []
            return Result(cur.rowcount, rows)

    def run_many(self, sql: str, parameters: Iterable[Params]) -> Result:
        text, rows = translate_many(sql, parameters)
        if not rows:
            return Result(0, [])
        with as_sqlite_errors(), self.connection().cursor() as cur:
            cur.executemany(text, rows)
            return Result(cur.rowcount, [])

    async def execute(self, sql: str, parameters: Params = ()) -> Result:
        return self.run(sql, parameters)

    async def executemany(self, sql: str, parameters: Iterable[Params]) -> Result:
        return self.run_many(sql, parameters)

    async def execute_fetchall(self, sql: str, parameters: Params = ()) -> list[Row]:
        return self.run(sql, parameters).rows()


class PgAsync:
    """The ``Connection`` protocol on the event loop: each call goes to a
    worker thread, one at a time (a psycopg connection is not shared)."""

    dialect = "postgresql"

    def __init__(
        self, direct: PgDirect, lock: AbstractAsyncContextManager[Any] | None = None
    ) -> None:
        self._direct = direct
        self._lock = lock or anyio.Lock()

    async def execute(self, sql: str, parameters: Params = ()) -> Result:
        async with self._lock:
            return await anyio.to_thread.run_sync(self._direct.run, sql, parameters)

    async def executemany(self, sql: str, parameters: Iterable[Params]) -> Result:
        rows = list(parameters)
        async with self._lock:
            return await anyio.to_thread.run_sync(self._direct.run_many, sql, rows)

    async def execute_fetchall(self, sql: str, parameters: Params = ()) -> list[Row]:
        return (await self.execute(sql, parameters)).rows()
