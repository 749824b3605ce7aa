"""Database: one ``sqlite3`` connection its store owns, and its write
transactions run in one go, on the event loop's thread when they can.

A write transaction's body is a plain synchronous function of the
connection: it runs whole, ``BEGIN IMMEDIATE`` to ``COMMIT``, with no round
trip through the event loop per statement. It runs on the loop's own thread
when SQLite's write lock is free (no hand-off at all), else on a worker
thread, which waits for the lock up to the connection's busy timeout while
the loop serves on. A body cannot await, so it cannot hold the write lock
(and, in the hub, every other writer) across somebody else's work.

One caller at a time: every use of the connection goes through the
database's lock, so two tasks never interleave inside one transaction. The
lock is taken without a turn of the loop when it is free (a lone mail's
every use paid one), and the database gives the loop a turn itself only
when it has been used back to back for :data:`YIELD_EVERY` seconds, so that
a caller running transaction after transaction still lets the loop serve
the others.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeAlias, TypeVar

import anyio
import anyio.lowlevel

from ..errors import TransactionFailed
from ._settings import Synchronous, open_connection

T = TypeVar("T")

Body: TypeAlias = Callable[[sqlite3.Connection], T]
"""A transaction's body (or a read's): a synchronous function of the connection."""

SLOW_TRANSACTION = 0.050
"""Seconds: a transaction that held the loop longer than this from BEGIN to
COMMIT without running (ten times an accept's fsync on a local disk) sends
the database's transactions off the loop's thread for :data:`SLOW_PAUSE`.
Its CPU time does not count: under load a large batch or a checkpoint can
take that long, and the thread, waiting for the GIL after every statement,
would make it longer."""

SLOW_PAUSE = 1.0
"""Seconds the database's transactions stay off the loop after a slow one."""

YIELD_EVERY = 0.005
"""Seconds of uses back to back (each begun within :data:`APART` of the end
of the one before) after which the next use gives the loop a turn first."""

APART = 0.0005
"""Seconds between the end of a use and the start of the next beyond which
the caller is taken to have awaited something else meanwhile: the loop had
its turns, and the uses are not back to back."""

_NORMAL = 1  # PRAGMA synchronous's value for NORMAL


@dataclass
class _Settings:
    busy_timeout: int  # ms, PRAGMA busy_timeout as the connection was opened with
    synchronous: int  # PRAGMA synchronous as the connection was opened with
    busy_now: int  # ms, PRAGMA busy_timeout as the last use left it
    synchronous_now: int  # PRAGMA synchronous as the last use left it
    off_loop_until: float = 0.0  # time.monotonic() after a slow one on the loop
    streak_from: float = 0.0  # time.monotonic() when uses began to follow back to back
    used_at: float = 0.0  # time.monotonic() at the end of the last use


class Database:
    """One SQLite connection and the one way to use it. :meth:`open` one;
    :meth:`aclose` it when done."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.path = path
        self._conn = conn
        self._lock = anyio.Lock(fast_acquire=True)
        (busy,) = conn.execute("PRAGMA busy_timeout").fetchone()
        (level,) = conn.execute("PRAGMA synchronous").fetchone()
        self._settings = _Settings(int(busy), int(level), int(busy), int(level))

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        busy_timeout: float = 5.0,
        synchronous: Synchronous | None = Synchronous.FULL,
        query_only: bool = False,
    ) -> Database:
        """A database on ``path`` (created if need be). ``synchronous``: the
        writer's durable settings at that level (``runtime.sqlite``'s
        ``open_connection``); None leaves the file's settings as they are (a
        reader's connection)."""
        path = Path(path)
        opened = partial(
            open_connection,
            path,
            busy_timeout=busy_timeout,
            synchronous=synchronous,
            query_only=query_only,
        )
        # Switching a new file to WAL writes it: off the loop.
        conn = await anyio.to_thread.run_sync(opened)
        return cls(conn, path)

    async def _turn(self) -> None:
        """Give the loop a turn when the uses have followed back to back for
        :data:`YIELD_EVERY` (with the lock held, as a lock taken the slow
        way does)."""
        settings, now = self._settings, time.monotonic()
        if now - settings.used_at > APART:
            settings.streak_from = now
        elif now - settings.streak_from >= YIELD_EVERY:
            settings.streak_from = now
            await anyio.lowlevel.cancel_shielded_checkpoint()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                self._conn.close()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def read(self, body: Body[T], *, heavy: bool = False) -> T:
        """``body`` outside a transaction (reads, pragmas, a migration that
        begins and commits its own): on the loop's thread, or with ``heavy``
        (a large read, a vacuum) on a worker thread.

        It runs at the connection's busy timeout. A read commits nothing, so
        it leaves the sync level as the last transaction left it (``NORMAL``
        after a lazy one): a body that commits on its own (a table made if
        missing, at a start) commits at that level; a ``heavy`` one (a
        vacuum, which moves pages) at the connection's own."""
        async with self._lock:
            try:
                settings = self._settings
                level = settings.synchronous if heavy else settings.synchronous_now
                _pragmas(self._conn, settings, settings.busy_timeout, level)
                if not heavy:
                    await self._turn()
                    return body(self._conn)
                with anyio.CancelScope(shield=True):
                    result = await anyio.to_thread.run_sync(body, self._conn)
                return result
            finally:
                self._settings.used_at = time.monotonic()

    async def transact(self, body: Body[T], *, durable: bool = True, heavy: bool = False) -> T:
        """``BEGIN IMMEDIATE``, ``body``, ``COMMIT``, in one go; the body's result.

        Where it runs: on the loop's thread when SQLite's write lock is free
        at once, else on a worker thread that waits for the lock up to the
        busy timeout. A ``heavy`` transaction (large bodies, say: tens of
        milliseconds) goes to the thread, and so does every transaction for
        :data:`SLOW_PAUSE` seconds after one held the loop longer than
        :data:`SLOW_TRANSACTION` waiting (a slow disk's fsync): on such a
        disk the loop is held that long once a second at most. On the loop
        there is no hand-off to a thread and back, and no wait for the GIL,
        which the loop holds whenever it runs Python and which a thread
        wants back after every statement (docs/performance.md,
        "Transactions on the loop").

        ``durable=False`` commits without waiting for the disk (``synchronous =
        NORMAL`` for this transaction alone): for a change nobody is told
        about and that is safe to lose in a power failure, which WAL then
        rolls back whole; the next durable commit makes it durable too. A
        crash of the process loses nothing either way.

        Any exception rolls back and is raised as it is, except that failing
        to begin or to commit is :class:`TransactionFailed`. Once started,
        the transaction runs to its end whatever happens to the caller: on
        the loop it never yields, and the wait for the thread is shielded, so
        no caller is cancelled while its change may have committed.
        """
        async with self._lock:
            settings = self._settings
            try:
                await self._turn()
                if not heavy and time.monotonic() >= settings.off_loop_until:
                    now = _transaction(self._conn, body, settings, durable=durable, wait=False)
                    if not isinstance(now, _Busy):
                        return now
                run = partial(_transaction, self._conn, body, settings, durable=durable, wait=True)
                with anyio.CancelScope(shield=True):
                    result = await anyio.to_thread.run_sync(run)
                assert not isinstance(result, _Busy)  # it waited for the lock
                return result
            finally:
                settings.used_at = time.monotonic()


class _Busy:
    """Another connection holds the write lock: nothing was begun."""


def _transaction(
    conn: sqlite3.Connection, body: Body[T], settings: _Settings, *, durable: bool, wait: bool
) -> T | _Busy:
    # On the loop nothing waits for SQLite's lock: a try that finds it held
    # goes to a worker thread, which waits up to the busy timeout. Once
    # BEGIN IMMEDIATE holds the write lock of a WAL file, no statement of
    # the transaction waits on another connection (the checkpoint a COMMIT
    # may run is passive, which never does): the body runs at the timeout
    # the begin had, and the connection keeps it for the next one.
    busy = settings.busy_timeout if wait else 0
    lazy = not durable and settings.synchronous > _NORMAL
    _pragmas(conn, settings, busy, _NORMAL if lazy else settings.synchronous)
    if not _begin(conn, wait=wait):
        return _Busy()
    began, ran = time.perf_counter(), 0.0 if wait else time.thread_time()
    try:
        result = body(conn)
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


def _pragmas(conn: sqlite3.Connection, settings: _Settings, busy: int, synchronous: int) -> None:
    """The busy timeout and the sync level a use needs, each set only when
    the use before left another: a lone mail's transactions and reads ask
    for what the last one left (it was two statements a transaction, four
    for a lazy one, each time). SQLite compiles a pragma that sets a value
    again at every run (a statement run once), so each set costs a parse."""
    if settings.busy_now != busy:
        conn.execute(f"PRAGMA busy_timeout = {busy}")
        settings.busy_now = busy
    if settings.synchronous_now != synchronous:
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        settings.synchronous_now = synchronous


def _waited(began: float, ran: float) -> float:
    """Seconds since ``began`` (``perf_counter``) this thread did not run
    since ``ran`` (``thread_time``): its waits for the disk, for a lock."""
    return (time.perf_counter() - began) - (time.thread_time() - ran)


def _begin(conn: sqlite3.Connection, *, wait: bool) -> bool:
    """``BEGIN IMMEDIATE``; without ``wait`` (and a busy timeout of 0),
    False at once (and nothing begun) if another connection holds the
    write lock."""
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
    return True


def _rollback(conn: sqlite3.Connection) -> None:
    # A failed ROLLBACK means SQLite already rolled the transaction back.
    if conn.in_transaction:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
