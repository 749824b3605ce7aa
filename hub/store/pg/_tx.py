"""PgTx: a :class:`~hub.store.sql.Tx` on an asyncpg connection, for a body
running on a worker thread.

A body is a plain function, and asyncpg's calls are coroutines on the event
loop: the store runs the body on a worker thread (``anyio.to_thread``) and
each call here is run on the loop by ``anyio.from_thread.run``, which waits
for it. The loop serves on meanwhile; the store's lock keeps one body on the
connection at a time. Each statement is prepared once per connection by
asyncpg's statement cache.

Errors come out as the store's own: a constraint violation is
``StoreConflict``, a lost connection or a timeout ``StoreUnavailable``, each
chained to asyncpg's; any other (a statement that is wrong) as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar, cast

import anyio.from_thread
import asyncpg

from ..._errors import StoreConflict, StoreUnavailable
from ..sql import Params, Row, Statement

T = TypeVar("T")

CONNECTION_ERRORS = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    OSError,
    TimeoutError,
)

Connection = asyncpg.Connection | asyncpg.pool.PoolConnectionProxy


def store_error(exc: Exception) -> Exception:
    """asyncpg's error as the store's own (its cause set), or ``exc`` itself."""
    ours: Exception
    if isinstance(exc, asyncpg.IntegrityConstraintViolationError):
        ours = StoreConflict(str(exc))
    elif isinstance(exc, CONNECTION_ERRORS):
        ours = StoreUnavailable(f"{type(exc).__name__}: {exc}")
    else:
        return exc
    ours.__cause__ = exc
    return ours


def _count(status: str) -> int:
    """Rows a command changed, from its status (``UPDATE 3``, ``INSERT 0 1``)."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else -1


class PgTx:
    """A transaction's (or a read's) statements on one asyncpg connection,
    called from a worker thread."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def _on_loop(self, call: Callable[..., Coroutine[Any, Any, T]], *args: object) -> T:
        try:
            return anyio.from_thread.run(call, *args)
        except Exception as exc:
            raise store_error(exc)  # noqa: B904 (its cause is set)

    def execute(self, statement: Statement, params: Params = ()) -> int:
        status = self._on_loop(self._conn.execute, statement.postgres, *statement.args(params))
        return _count(status)

    def execute_many(self, statement: Statement, rows: Iterable[Params]) -> None:
        args = [statement.args(row) for row in rows]
        if args:
            self._on_loop(self._conn.executemany, statement.postgres, args)

    def fetch_all(self, statement: Statement, params: Params = ()) -> list[Row]:
        rows: list[Any] = self._on_loop(
            self._conn.fetch, statement.postgres, *statement.args(params)
        )
        return cast(list[Row], rows)

    def fetch_one(self, statement: Statement, params: Params = ()) -> Row | None:
        row: Any = self._on_loop(self._conn.fetchrow, statement.postgres, *statement.args(params))
        return cast(Row | None, row)
