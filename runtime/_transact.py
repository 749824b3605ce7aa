"""A write transaction in one go: on the event loop's thread when it can,
else in one trip to the database thread.

aiosqlite runs each call of a connection on that connection's own thread,
and every call is a round trip: the loop hands the statement over, the
thread runs it, the loop is woken to carry on. A transaction of ten
statements holds SQLite's write lock (and, in the hub, every other writer)
across ten such trips, and under load each wake waits its turn behind
whatever else the loop is doing.

So a write transaction's body runs whole, without a round trip per
statement: on the loop's own thread when SQLite's write lock is free (no
hand-off at all), on the database thread otherwise. Bodies stay coroutines
over a :class:`Connection`, so they read as every other store function does
and work on an aiosqlite connection as well; here they get a
:class:`Direct` connection whose calls finish at once, and the body is
driven to its end without an event loop. A body that awaits anything other
than its connection would need the loop: that is a bug, and raises
:class:`TransactionSuspended`.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeAlias, TypeVar
from weakref import WeakKeyDictionary

import aiosqlite
import anyio

from ._errors import TransactionFailed, TransactionSuspended

T = TypeVar("T")

_NORMAL = 1  # PRAGMA synchronous's value for NORMAL

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
    """A :class:`Connection` whose calls run at once, on the thread that
    drives the body (the loop's or the database thread)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, parameters: Params = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, parameters)

    async def executemany(self, sql: str, parameters: Iterable[Params]) -> sqlite3.Cursor:
        return self._conn.executemany(sql, parameters)

    async def execute_fetchall(self, sql: str, parameters: Params = ()) -> list[sqlite3.Row]:
        return self._conn.execute(sql, parameters).fetchall()


async def transact(
    db: aiosqlite.Connection, body: Body[T], *, durable: bool = True, heavy: bool = False
) -> T:
    """``BEGIN IMMEDIATE``, ``body``, ``COMMIT``, in one go; the body's result.
    The caller serialises writers, and ``db`` comes from :func:`connect_sqlite`.

    Where it runs: on the calling thread (the event loop's) when SQLite's
    write lock is free at once, else on ``db``'s thread, which waits for the
    lock up to the connection's busy timeout while the loop serves on. A
    ``heavy`` transaction (large bodies, say: tens of milliseconds) goes to
    the thread, and so does every transaction for :data:`SLOW_PAUSE`
    seconds after one held the loop longer than :data:`SLOW_TRANSACTION`
    waiting (a slow disk's fsync): on such a disk the loop is held that
    long once a second at most. Time the transaction spent running does
    not count: a large batch or a checkpoint's copying would take longer
    on the thread, not less. On the loop there is no hand-off to the
    thread and back, and no wait for the GIL, which the loop holds
    whenever it runs Python and which a thread wants back after every
    statement (docs/performance-notebook.md, "Transactions on the loop").

    ``durable=False`` commits without waiting for the disk (``synchronous =
    NORMAL`` for this transaction alone): for a change nobody is told about
    and that is safe to lose in a power failure, which WAL then rolls back
    whole; the next durable commit makes it durable too. A crash of the
    process loses nothing either way.

    Any exception rolls back and is raised as it is, except that failing to
    begin or to commit is :class:`TransactionFailed`. Once started, the
    transaction runs to its end whatever happens to the caller: on the loop
    it never yields, and the wait for the thread is shielded, so no caller
    is cancelled while its change may have committed.
    """
    conn = db._conn
    settings = _settings(db, conn)
    if not heavy and time.monotonic() >= settings.off_loop_until:
        now = _transaction(conn, body, settings, durable=durable, wait=False)
        if not isinstance(now, _Busy):
            return now
    with anyio.CancelScope(shield=True):
        # aiosqlite's public calls are one statement each; _execute is how they
        # reach the connection's thread, in order with every other call.
        run = partial(_transaction, body=body, settings=settings, durable=durable, wait=True)
        result: T = await db._execute(run, conn)  # type: ignore[no-untyped-call]
    return result


SLOW_TRANSACTION = 0.050
"""Seconds: a transaction that held the loop longer than this from BEGIN to
COMMIT without running (ten times an accept's fsync on a local disk) sends
the connection's transactions off the loop's thread for :data:`SLOW_PAUSE`.
Its CPU time does not count: under load a large batch or a checkpoint can
take that long, and the thread, waiting for the GIL after every statement,
would make it longer."""

SLOW_PAUSE = 1.0
"""Seconds the connection's transactions stay off the loop after a slow one."""


@dataclass
class _Settings:
    busy_timeout: int  # ms, PRAGMA busy_timeout as the connection had it
    synchronous: int  # PRAGMA synchronous as the connection had it
    off_loop_until: float = 0.0  # time.monotonic() after a slow one on the loop


# Read once per connection, on its first transaction: a transaction sets
# both pragmas and puts them back, and reading them each time is two more
# statements a transaction.
_known: WeakKeyDictionary[aiosqlite.Connection, _Settings] = WeakKeyDictionary()


def _settings(db: aiosqlite.Connection, conn: sqlite3.Connection) -> _Settings:
    known = _known.get(db)
    if known is None:
        (busy,) = conn.execute("PRAGMA busy_timeout").fetchone()
        (level,) = conn.execute("PRAGMA synchronous").fetchone()
        known = _known[db] = _Settings(int(busy), int(level))
    return known


class _Busy:
    """Another connection holds the write lock: nothing was begun."""


def _transaction(
    conn: sqlite3.Connection, body: Body[T], settings: _Settings, *, durable: bool, wait: bool
) -> T | _Busy:
    lazy = not durable and settings.synchronous > _NORMAL
    if lazy:
        conn.execute(f"PRAGMA synchronous = {_NORMAL}")
    try:
        if not _begin(conn, settings, wait=wait):
            return _Busy()
        began, ran = time.perf_counter(), 0.0 if wait else time.thread_time()
        try:
            result = drive(body(Direct(conn)))
        except BaseException:
            _rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            raise TransactionFailed(f"commit failed: {exc}") from exc
        # On the loop; the wall clock first, as a thread's CPU clock is a
        # system call (about 0.5 us, in every transaction of both processes).
        slow = not wait and time.perf_counter() - began > SLOW_TRANSACTION
        if slow and _waited(began, ran) > SLOW_TRANSACTION:
            settings.off_loop_until = time.monotonic() + SLOW_PAUSE
        return result
    finally:
        if lazy:
            conn.execute(f"PRAGMA synchronous = {settings.synchronous}")


def _waited(began: float, ran: float) -> float:
    """Seconds since ``began`` (``perf_counter``) this thread did not run
    since ``ran`` (``thread_time``): its waits for the disk, for a lock."""
    return (time.perf_counter() - began) - (time.thread_time() - ran)


def _begin(conn: sqlite3.Connection, settings: _Settings, *, wait: bool) -> bool:
    """``BEGIN IMMEDIATE``; without ``wait``, False at once (and nothing
    begun) if another connection holds the write lock."""
    if not wait:
        conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        # The low byte is the primary code of an extended one (BUSY_RECOVERY...).
        busy = isinstance(exc, sqlite3.OperationalError) and (
            exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
        )
        if busy and not wait:
            return False
        raise TransactionFailed(f"cannot begin a write transaction: {exc}") from exc
    finally:
        if not wait:
            conn.execute(f"PRAGMA busy_timeout = {settings.busy_timeout}")
    return True


def drive(coro: Coroutine[Any, Any, T]) -> T:
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
