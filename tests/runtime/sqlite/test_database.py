"""runtime.sqlite.Database: a whole write transaction in one go, on the
loop's thread while SQLite's lock is free and on a worker thread otherwise,
all or nothing, and never a cancelled caller whose change committed."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import runtime.sqlite._database as _database
from runtime.errors import TransactionFailed
from runtime.sqlite import SLOW_TRANSACTION, Database, Synchronous

pytestmark = pytest.mark.anyio


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with await Database.open(tmp_path / "t.db") as database:
        await database.read(lambda c: c.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)"))
        yield database


def rows_of(conn: sqlite3.Connection) -> list[tuple[str, int]]:
    return [(k, v) for k, v in conn.execute("SELECT k, v FROM t ORDER BY k")]


async def rows(db: Database) -> list[tuple[str, int]]:
    return await db.read(rows_of)


def pragma(name: str, conn: sqlite3.Connection) -> object:
    (value,) = conn.execute(f"PRAGMA {name}").fetchone()
    return value


async def test_a_body_commits_whole_and_its_result_comes_back(db: Database) -> None:
    seen: list[int] = []

    def body(conn: sqlite3.Connection) -> int:
        seen.append(threading.get_ident())
        conn.execute("INSERT INTO t VALUES ('a', 1)")
        cur = conn.executemany("INSERT INTO t VALUES (?, ?)", [("b", 2), ("c", 3)])
        assert cur.rowcount == 2
        (total,) = conn.execute("SELECT SUM(v) FROM t").fetchone()
        return int(total)

    assert await db.transact(body) == 6
    assert await rows(db) == [("a", 1), ("b", 2), ("c", 3)]
    assert seen == [threading.get_ident()]  # the lock was free: on the loop's thread
    assert not await db.read(lambda c: c.in_transaction)


async def test_a_writer_is_durable_and_bounded_and_a_reader_changes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.db"
    async with await Database.open(path) as writer:
        assert await writer.read(partial(pragma, "synchronous")) == 2  # FULL
        assert await writer.read(partial(pragma, "journal_mode")) == "wal"
        assert await writer.read(partial(pragma, "auto_vacuum")) == 2  # INCREMENTAL
        assert await writer.read(partial(pragma, "temp_store")) == 2  # MEMORY
    async with await Database.open(path, synchronous=Synchronous.NORMAL) as writer:
        assert await writer.read(partial(pragma, "synchronous")) == 1
    async with await Database.open(path, synchronous=None, query_only=True) as reader:
        assert await reader.read(partial(pragma, "query_only")) == 1
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await reader.read(lambda c: c.execute("CREATE TABLE x (y)"))


async def test_a_heavy_transaction_runs_on_a_worker_thread(db: Database) -> None:
    seen: list[int] = []

    def body(conn: sqlite3.Connection) -> None:
        seen.append(threading.get_ident())
        conn.execute("INSERT INTO t VALUES ('a', 1)")

    await db.transact(body, heavy=True)
    assert len(seen) == 1 and seen[0] != threading.get_ident()
    assert await rows(db) == [("a", 1)]


async def test_a_heavy_read_runs_on_a_worker_thread(db: Database) -> None:
    threads = [await db.read(lambda _: threading.get_ident(), heavy=flag) for flag in (False, True)]
    assert threads[0] == threading.get_ident() != threads[1]


async def test_after_a_slow_transaction_on_the_loop_the_next_ones_run_off_it_a_while(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shorter than the slow body's own pause: the transaction that runs off
    # the loop outlasts it, so the one after it is back on the loop.
    monkeypatch.setattr(_database, "SLOW_PAUSE", SLOW_TRANSACTION * 1.5)
    threads: list[int] = []

    def body(conn: sqlite3.Connection, *, pause: float = 0.0) -> None:
        threads.append(threading.get_ident())
        conn.execute("INSERT INTO t VALUES (?, ?)", (f"k{len(rows_of(conn))}", 0))
        threading.Event().wait(pause)  # holds the thread driving it, as a slow fsync would

    loop = threading.get_ident()
    slow = partial(body, pause=SLOW_TRANSACTION * 2)
    # The quick ones commit without an fsync, which a disk busy with other
    # suites can make slow; and the loop's thread descheduled for long by a
    # busy machine counts as waiting, so an attempt may still be spoiled:
    # attempts, one of which must go as planned.
    for attempt in range(1, 16):
        threads.clear()
        monkeypatch.setattr(db._settings, "off_loop_until", 0.0)
        await db.transact(slow, heavy=True)  # a heavy one's time says nothing
        await db.transact(body, durable=False)
        await db.transact(slow)  # on the loop, and slow
        await db.transact(slow)  # so this one goes to the thread (slow there: not counted)
        await db.transact(body, durable=False)  # the pause is over: back on the loop
        assert len(await rows(db)) == 5 * attempt  # each committed, wherever it ran
        if [t == loop for t in threads] == [False, True, True, False, True]:
            break
    assert [t == loop for t in threads] == [False, True, True, False, True]


class Clock:
    """The clocks a database reads (``_database.time``), moved by the bodies
    alone: a body works (its thread's CPU time and the wall clock advance
    together) or waits (the wall clock alone), as no loaded machine lets a
    real body do exactly."""

    def __init__(self) -> None:
        self.wall = 1000.0
        self.cpu = 0.0

    def work(self, seconds: float) -> None:
        self.wall += seconds
        self.cpu += seconds

    def wait(self, seconds: float) -> None:
        self.wall += seconds

    def perf_counter(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.wall

    def thread_time(self) -> float:
        return self.cpu


async def test_a_transaction_long_with_its_own_work_keeps_the_next_ones_on_the_loop(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large batch under load, a checkpoint's copying: on the thread it
    # would only take longer, waiting for the GIL after every statement.
    clock = Clock()
    monkeypatch.setattr(_database, "time", clock)
    threads: list[int] = []
    keys = iter(range(100))

    def body(conn: sqlite3.Connection, *, work: float = 0.0, wait: float = 0.0) -> None:
        threads.append(threading.get_ident())
        conn.execute("INSERT INTO t VALUES (?, 1)", (f"k{next(keys)}",))
        clock.work(work)
        clock.wait(wait)

    loop = threading.get_ident()
    long = SLOW_TRANSACTION * 20
    await db.transact(partial(body, work=long))  # long, all of it its own work
    await db.transact(body)
    await db.transact(partial(body, work=long, wait=SLOW_TRANSACTION / 2))  # a short wait
    await db.transact(body)
    await db.transact(partial(body, work=long, wait=SLOW_TRANSACTION * 2))  # a long one
    await db.transact(body)  # off the loop
    assert [t == loop for t in threads] == [True, True, True, True, True, False]
    assert len(await rows(db)) == 6


async def test_a_lock_held_elsewhere_is_waited_for_off_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    threads: list[int] = []
    served = anyio.Event()

    def body(conn: sqlite3.Connection) -> None:
        threads.append(threading.get_ident())
        conn.execute("INSERT INTO t VALUES ('a', 1)")

    async def other_task() -> None:
        # Runs while the transaction waits: the loop is not held.
        await anyio.lowlevel.checkpoint()
        served.set()

    async with await Database.open(path, busy_timeout=10) as db:
        await db.read(lambda c: c.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)"))
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(db.transact, body)
                    tg.start_soon(other_task)
                    await served.wait()
                    assert threads == []
                    other.rollback()
        finally:
            other.close()
        assert threads and threads[0] != threading.get_ident()
        assert await rows(db) == [("a", 1)]
        # The attempt on the loop put the busy timeout back.
        assert await db.read(partial(pragma, "busy_timeout")) == 10000


async def test_a_lazy_transaction_runs_at_normal_and_leaves_the_level_as_it_was(
    db: Database,
) -> None:
    levels: list[int] = []

    def body(conn: sqlite3.Connection) -> None:
        (level,) = conn.execute("PRAGMA synchronous").fetchone()
        levels.append(int(level))
        conn.execute("INSERT INTO t VALUES (?, ?)", (f"k{len(levels)}", level))

    def failing(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('b', 2)")
        raise LookupError("no")

    await db.transact(body, durable=False)
    with pytest.raises(LookupError):
        await db.transact(failing, durable=False)
    await db.transact(body)
    assert levels == [1, 2]  # NORMAL for the lazy one alone, FULL again after
    assert await db.read(partial(pragma, "synchronous")) == 2  # restored after a rollback too
    assert await rows(db) == [("k1", 1), ("k2", 2)]  # the failed one left nothing


async def test_an_error_in_the_body_rolls_everything_back(db: Database) -> None:
    def body(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('a', 1)")
        conn.execute("INSERT INTO t VALUES ('a', 2)")  # the primary key refuses

    with pytest.raises(sqlite3.IntegrityError):
        await db.transact(body)
    assert await rows(db) == []
    assert not await db.read(lambda c: c.in_transaction)


async def test_a_database_locked_by_another_writer_fails_to_begin(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with await Database.open(path, busy_timeout=0.05) as db:
        await db.read(lambda c: c.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)"))
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")

            def body(conn: sqlite3.Connection) -> None:
                raise AssertionError("must not run")

            with pytest.raises(TransactionFailed, match="cannot begin"):
                await db.transact(body)
        finally:
            other.close()
        assert await rows(db) == []


async def test_a_caller_cancelled_meanwhile_learns_of_it_only_after_the_commit(
    db: Database,
) -> None:
    inside, release = threading.Event(), threading.Event()
    returned = False

    def body(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('a', 1)")
        inside.set()
        release.wait(10)  # holds the worker thread, as a slow fsync would

    async def caller() -> None:
        nonlocal returned
        # Heavy: on the thread, where a cancellation can arrive meanwhile
        # (on the loop's thread nothing else runs until the commit).
        await db.transact(body, heavy=True)
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


async def test_two_tasks_never_interleave_inside_one_transaction(db: Database) -> None:
    inside = 0
    most = 0

    def body(conn: sqlite3.Connection, key: str) -> None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        conn.execute("INSERT INTO t VALUES (?, 1)", (key,))
        inside -= 1

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(partial(db.transact, partial(body, key=f"k{n}"), heavy=n % 2 == 0))
    assert most == 1
    assert len(await rows(db)) == 20


async def test_uses_back_to_back_give_the_loop_turns_and_uses_apart_pay_none(
    db: Database,
) -> None:
    turns = 0
    running = True

    async def other() -> None:
        nonlocal turns
        while running:
            turns += 1
            await anyio.lowlevel.checkpoint()

    def put(n: int, conn: sqlite3.Connection) -> None:
        conn.execute("INSERT OR REPLACE INTO t VALUES ('k', ?)", (n,))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            # Back to back, with no other await: the loop still gets turns,
            # the first ones after about YIELD_EVERY each; a loaded machine
            # stretches that, hence the deadline, which only a database that
            # never gives the loop a turn reaches.
            began, n, before = time.monotonic(), 0, turns
            while turns - before < 5 and time.monotonic() - began < 10:
                n += 1
                await db.transact(partial(put, n), durable=False)
            assert turns - before >= 5
            # Apart (the caller awaited something else between them): the
            # uses themselves give the loop no turn.
            spied: list[int] = []
            real = anyio.lowlevel.cancel_shielded_checkpoint

            async def spy() -> None:
                spied.append(1)
                await real()

            _database.anyio.lowlevel.cancel_shielded_checkpoint = spy  # type: ignore[assignment]
            try:
                for n in range(5):
                    await anyio.sleep(2 * _database.APART)
                    await db.transact(partial(put, n), durable=False)
                    await anyio.sleep(2 * _database.APART)
                    await db.read(rows_of)
            finally:
                _database.anyio.lowlevel.cancel_shielded_checkpoint = real  # type: ignore[assignment]
            running = False
    assert spied == []


async def test_transactions_on_the_loop_set_a_pragma_only_when_the_last_use_left_another(
    db: Database,
) -> None:
    statements: list[str] = []
    busy: list[object] = []

    def put(key: str, conn: sqlite3.Connection) -> None:
        busy.append(pragma("busy_timeout", conn))
        conn.execute("INSERT INTO t VALUES (?, 1)", (key,))

    await db.read(lambda c: c.set_trace_callback(statements.append))
    for key, durable in [("a", True), ("b", True), ("c", False), ("d", False), ("e", True)]:
        await db.transact(partial(put, key), durable=durable)
    traced = list(statements)
    await db.read(lambda c: c.set_trace_callback(None))
    assert [k for k, _ in await rows(db)] == ["a", "b", "c", "d", "e"]
    # The first transaction after a read drops the busy timeout, the first
    # lazy one and the durable one after the lazy ones set the level: each
    # once, where every transaction set two pragmas and a lazy one four.
    assert [s for s in traced if s.startswith("PRAGMA") and "=" in s] == [
        "PRAGMA busy_timeout = 0",
        "PRAGMA synchronous = 1",
        "PRAGMA synchronous = 2",
    ]
    assert traced.count("BEGIN IMMEDIATE") == traced.count("COMMIT") == 5
    # The bodies on the loop ran without a busy timeout (the write lock was
    # theirs); a read, which may wait, has the connection's own again.
    assert busy == [0] * 5
    assert await db.read(partial(pragma, "busy_timeout")) == 5000
    assert await db.read(partial(pragma, "synchronous")) == 2


async def test_a_read_leaves_the_sync_level_a_lazy_transaction_left(db: Database) -> None:
    statements: list[str] = []
    levels: list[object] = []

    def put(key: str, conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (?, 1)", (key,))

    def look(conn: sqlite3.Connection) -> None:
        levels.append(pragma("synchronous", conn))
        conn.execute("SELECT COUNT(*) FROM t").fetchone()

    await db.read(lambda c: c.set_trace_callback(statements.append))
    for key in ("a", "b"):
        await db.transact(partial(put, key), durable=False)
        await db.read(look)
    await db.transact(partial(put, "c"))
    await db.read(look, heavy=True)
    await db.transact(partial(put, "d"), durable=False)
    await db.read(look, heavy=True)
    traced = list(statements)
    await db.read(lambda c: c.set_trace_callback(None))
    assert [k for k, _ in await rows(db)] == ["a", "b", "c", "d"]
    # A read commits nothing: the lazy level stays for the next lazy
    # transaction, and only the durable one sets FULL again. A heavy read
    # (a vacuum commits what it moves) runs at the connection's own level.
    assert levels == [1, 1, 2, 2]
    assert [s for s in traced if s.startswith("PRAGMA synchronous =")] == [
        "PRAGMA synchronous = 1",
        "PRAGMA synchronous = 2",
        "PRAGMA synchronous = 1",
        "PRAGMA synchronous = 2",
    ]
    assert traced.count("BEGIN IMMEDIATE") == traced.count("COMMIT") == 4
