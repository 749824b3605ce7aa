"""A write transaction in one trip to the database thread.

aiosqlite runs each call of a connection on that connection's own thread,
and every call is a round trip: the loop hands the statement over, the
thread runs it, the loop is woken to carry on. A transaction of ten
statements holds SQLite's write lock (and, in the hub, every other writer)
across ten such trips, and under load each wake waits its turn behind
whatever else the loop is doing.

So a write transaction's body runs on the database thread, whole. Bodies
stay coroutines over a :class:`Connection`, so they read as every other
store function does and work on an aiosqlite connection as well; on the
thread they get a :class:`Direct` connection whose calls finish at once,
and the body is driven to its end without an event loop. A body that awaits
anything other than its connection would need the loop: that is a bug, and
raises :class:`TransactionSuspended`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import suppress
from functools import partial
from typing import Any, Protocol, TypeAlias, TypeVar

import aiosqlite
import anyio

from ._errors import TransactionFailed, TransactionSuspended

T = TypeVar("T")

Params: TypeAlias = Sequence[object] | Mapping[str, object]
"""Positional (``?``) or named (``:name``) parameters, as sqlite3 takes them."""


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...


class Connection(Protocol):
    """What store code calls on a connection: aiosqlite's and :class:`Direct`
    fit, and the hub's PostgreSQL ones (asyncpg's, behind an adapter)."""

    def execute(self, sql: str, parameters: Params = ...) -> Awaitable[Cursor]: ...

    def executemany(self, sql: str, parameters: Iterable[Params]) -> Awaitable[Cursor]: ...

    def execute_fetchall(self, sql: str, parameters: Params = ...) -> Awaitable[Iterable[Any]]:
        """Rows read by position and by column name: ``sqlite3.Row``, or a
        row of another database's connection that reads the same."""
        ...


Body: TypeAlias = Callable[[Connection], Coroutine[Any, Any, T]]
"""A write transaction's body: awaits only its connection."""


class Direct:
    """A :class:`Connection` on the database thread: each call runs there and then."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, parameters: Params = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, parameters)

    async def executemany(self, sql: str, parameters: Iterable[Params]) -> sqlite3.Cursor:
        return self._conn.executemany(sql, parameters)

    async def execute_fetchall(self, sql: str, parameters: Params = ()) -> list[sqlite3.Row]:
        return self._conn.execute(sql, parameters).fetchall()


async def transact(db: aiosqlite.Connection, body: Body[T], *, durable: bool = True) -> T:
    """``BEGIN IMMEDIATE``, ``body``, ``COMMIT`` on ``db``'s thread, in one
    trip; the body's result. The caller serialises writers.

    ``durable=False`` commits without waiting for the disk (``synchronous =
    NORMAL`` for this transaction alone): for a change nobody is told about
    and that is safe to lose in a power failure, which WAL then rolls back
    whole; the next durable commit makes it durable too. A crash of the
    process loses nothing either way.

    Any exception rolls back and is raised as it is, except that failing to
    begin or to commit is :class:`TransactionFailed`. Once handed over, the
    transaction runs to its end whatever happens to the caller: the wait is
    shielded, so no caller is cancelled while its change may have committed.
    """
    with anyio.CancelScope(shield=True):
        # aiosqlite's public calls are one statement each; _execute is how they
        # reach the connection's thread, in order with every other call.
        run = partial(_run if durable else _run_lazily, body=body)
        result: T = await db._execute(run, db._conn)  # type: ignore[no-untyped-call]
    return result


def _run(conn: sqlite3.Connection, body: Body[T]) -> T:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise TransactionFailed(f"cannot begin a write transaction: {exc}") from exc
    try:
        result = _drive(body(Direct(conn)))
    except BaseException:
        _rollback(conn)
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        _rollback(conn)
        raise TransactionFailed(f"commit failed: {exc}") from exc
    return result


def _run_lazily(conn: sqlite3.Connection, body: Body[T]) -> T:
    (level,) = conn.execute("PRAGMA synchronous").fetchone()
    conn.execute("PRAGMA synchronous = NORMAL")
    try:
        return _run(conn, body)
    finally:
        conn.execute(f"PRAGMA synchronous = {int(level)}")


def _drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a transaction body that awaits only a connection whose calls
    finish at once (:class:`Direct`) to its end, without an event loop;
    :class:`TransactionSuspended` if it awaits anything else."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise TransactionSuspended("a transaction body awaited something other than its connection")


def _rollback(conn: sqlite3.Connection) -> None:
    # A failed ROLLBACK means SQLite already rolled the transaction back.
    if conn.in_transaction:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
