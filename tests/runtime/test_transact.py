"""runtime.transact: a whole write transaction in one go, on the loop's thread
while SQLite's lock is free and on the database thread otherwise, all or
nothing, and never a cancelled caller whose change committed."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Generator
from functools import partial
from pathlib import Path

import aiosqlite
import anyio
import pytest

import runtime._transact as _transact
from runtime import (
    SLOW_TRANSACTION,
    Connection,
    TransactionFailed,
    TransactionSuspended,
    connect_sqlite,
    transact,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    conn = await connect_sqlite(tmp_path / "t.db")
    try:
        await conn.execute("PRAGMA journal_mode = WAL")
        await conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
        yield conn
    finally:
        await conn.close()


async def rows(db: aiosqlite.Connection) -> list[tuple[str, int]]:
    return [(k, v) for k, v in await db.execute_fetchall("SELECT k, v FROM t ORDER BY k")]


async def test_a_body_commits_whole_and_its_result_comes_back(db: aiosqlite.Connection) -> None:
    seen: list[int] = []

    async def body(conn: Connection) -> int:
        seen.append(threading.get_ident())
        await conn.execute("INSERT INTO t VALUES ('a', 1)")
        cur = await conn.executemany("INSERT INTO t VALUES (?, ?)", [("b", 2), ("c", 3)])
        assert cur.rowcount == 2
        ((total,),) = await conn.execute_fetchall("SELECT SUM(v) FROM t")
        return int(total)

    assert await transact(db, body) == 6
    assert await rows(db) == [("a", 1), ("b", 2), ("c", 3)]
    assert seen == [threading.get_ident()]  # the lock was free: on the loop's thread
    assert not db.in_transaction


async def test_a_heavy_transaction_runs_on_the_connections_thread(
    db: aiosqlite.Connection,
) -> None:
    seen: list[int] = []

    async def body(conn: Connection) -> None:
        seen.append(threading.get_ident())
        await conn.execute("INSERT INTO t VALUES ('a', 1)")

    await transact(db, body, heavy=True)
    assert len(seen) == 1 and seen[0] != threading.get_ident()
    assert await rows(db) == [("a", 1)]


async def test_after_a_slow_transaction_on_the_loop_the_next_ones_run_off_it_a_while(
    db: aiosqlite.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shorter than the slow body's own pause: the transaction that runs off
    # the loop outlasts it, so the one after it is back on the loop.
    monkeypatch.setattr(_transact, "SLOW_PAUSE", SLOW_TRANSACTION * 1.5)
    threads: list[int] = []

    async def body(conn: Connection, *, pause: float = 0.0) -> None:
        threads.append(threading.get_ident())
        await conn.execute("INSERT INTO t VALUES (?, ?)", (f"k{len(threads)}", len(threads)))
        threading.Event().wait(pause)  # holds the thread driving it, as a slow fsync would

    loop = threading.get_ident()
    slow = partial(body, pause=SLOW_TRANSACTION * 2)
    await transact(db, slow, heavy=True)  # a heavy one's time says nothing
    await transact(db, body)
    await transact(db, slow)  # on the loop, and slow
    await transact(db, slow)  # so this one goes to the thread (slow there: not counted)
    await transact(db, body)  # the pause is over: back on the loop
    assert [t == loop for t in threads] == [False, True, True, False, True]
    assert len(await rows(db)) == 5


async def test_a_transaction_long_with_its_own_work_keeps_the_next_ones_on_the_loop(
    db: aiosqlite.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large batch under load, a checkpoint's copying: on the thread it
    # would only take longer, waiting for the GIL after every statement.
    # A bound that leaves the loop's thread room to be descheduled a while
    # on a busy machine (that counts as waiting) without crossing it.
    slow = 0.2
    monkeypatch.setattr(_transact, "SLOW_TRANSACTION", slow)
    threads: list[int] = []

    async def body(conn: Connection, *, busy: float = 0.0) -> None:
        threads.append(threading.get_ident())
        await conn.execute("INSERT INTO t VALUES (?, ?)", (f"k{len(threads)}", len(threads)))
        until = time.thread_time() + busy
        while time.thread_time() < until:  # CPU, not a wait
            pass

    loop = threading.get_ident()
    await transact(db, partial(body, busy=slow * 1.25))
    await transact(db, body)
    assert [t == loop for t in threads] == [True, True]
    assert len(await rows(db)) == 2


async def test_a_lock_held_elsewhere_is_waited_for_off_the_loop(
    db: aiosqlite.Connection, tmp_path: Path
) -> None:
    await db.execute("PRAGMA busy_timeout = 10000")
    other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    threads: list[int] = []
    served = anyio.Event()

    async def body(conn: Connection) -> None:
        threads.append(threading.get_ident())
        await conn.execute("INSERT INTO t VALUES ('a', 1)")

    async def other_task() -> None:
        # Runs while the transaction waits: the loop is not held.
        await anyio.lowlevel.checkpoint()
        served.set()

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(transact, db, body)
                tg.start_soon(other_task)
                await served.wait()
                assert threads == []
                other.rollback()
    finally:
        other.close()
    assert threads and threads[0] != threading.get_ident()
    assert await rows(db) == [("a", 1)]
    ((timeout,),) = await db.execute_fetchall("PRAGMA busy_timeout")
    assert timeout == 10000  # the attempt on the loop put it back


async def test_a_lazy_transaction_runs_at_normal_and_leaves_the_level_as_it_was(
    db: aiosqlite.Connection,
) -> None:
    await db.execute("PRAGMA synchronous = FULL")
    levels: list[int] = []

    async def body(conn: Connection) -> None:
        ((level,),) = await conn.execute_fetchall("PRAGMA synchronous")
        levels.append(int(level))
        await conn.execute("INSERT INTO t VALUES (?, ?)", (f"k{len(levels)}", level))

    async def failing(conn: Connection) -> None:
        await conn.execute("INSERT INTO t VALUES ('b', 2)")
        raise LookupError("no")

    await transact(db, body, durable=False)
    with pytest.raises(LookupError):
        await transact(db, failing, durable=False)
    await transact(db, body)
    assert levels == [1, 2]  # NORMAL for the lazy one alone, FULL again after
    ((level,),) = await db.execute_fetchall("PRAGMA synchronous")
    assert level == 2  # restored after a rollback too
    assert await rows(db) == [("k1", 1), ("k2", 2)]  # the failed one left nothing


async def test_an_error_in_the_body_rolls_everything_back(db: aiosqlite.Connection) -> None:
    async def body(conn: Connection) -> None:
        await conn.execute("INSERT INTO t VALUES ('a', 1)")
        await conn.execute("INSERT INTO t VALUES ('a', 2)")  # the primary key refuses

    with pytest.raises(sqlite3.IntegrityError):
        await transact(db, body)
    assert await rows(db) == []
    assert not db.in_transaction


class _Suspend:
    """What awaiting anything but the connection comes to: the coroutine yields."""

    def __await__(self) -> Generator[None, None, None]:
        yield


async def test_a_body_that_awaits_anything_else_is_refused(db: aiosqlite.Connection) -> None:
    async def body(conn: Connection) -> None:
        await conn.execute("INSERT INTO t VALUES ('a', 1)")
        await _Suspend()

    with pytest.raises(TransactionSuspended):
        await transact(db, body)
    assert await rows(db) == []


async def test_a_database_locked_by_another_writer_fails_to_begin(
    db: aiosqlite.Connection, tmp_path: Path
) -> None:
    await db.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")

        async def body(conn: Connection) -> None:
            raise AssertionError("must not run")

        with pytest.raises(TransactionFailed, match="cannot begin"):
            await transact(db, body)
    finally:
        other.close()
    assert await rows(db) == []


async def test_a_caller_cancelled_meanwhile_learns_of_it_only_after_the_commit(
    db: aiosqlite.Connection,
) -> None:
    inside, release = threading.Event(), threading.Event()
    returned = False

    async def body(conn: Connection) -> None:
        await conn.execute("INSERT INTO t VALUES ('a', 1)")
        inside.set()
        release.wait(10)  # holds the database thread, as a slow fsync would

    async def caller() -> None:
        nonlocal returned
        # Heavy: on the thread, where a cancellation can arrive meanwhile
        # (on the loop's thread nothing else runs until the commit).
        await transact(db, body, heavy=True)
        returned = True  # the cancellation is delivered at the next checkpoint
        await anyio.sleep_forever()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await anyio.to_thread.run_sync(inside.wait, 10)
            tg.cancel_scope.cancel()
            release.set()
    assert returned
    assert await rows(db) == [("a", 1)]
