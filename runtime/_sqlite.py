"""How both durable stores (the hub's ``hub.db``, a sidecar's ``inbox.db``) use SQLite.

Durability: WAL with ``synchronous=FULL``. Every commit on these
connections is told to another party before long (a 202 receipt, a
``stored`` Ack, an EventsAck, a Welcome, the events a processing commit
queued), and under ``NORMAL`` a WAL commit reaches the disk only at the next
checkpoint: an OS crash or a power cut could take back what was answered.
``FULL`` syncs the WAL at every commit (docs/operations.md, "Durability",
has the cost, measured against ``NORMAL`` through ``MAILRUN_SQLITE_SYNCHRONOUS``,
which exists for that measurement only).

Bounded files: the WAL is truncated back to ``JOURNAL_SIZE_LIMIT`` whenever
it restarts (SQLite keeps a WAL at its largest size otherwise: one batch of
big envelopes would leave a file that size for good), and a new database is
created with incremental auto-vacuum, so :func:`release_free_pages` can give
the pages that retention freed back to the file system. A database created
before keeps its free pages and reuses them (converting it takes a
``VACUUM``, which rewrites the whole file: left to the operator).

Speed: statement journals (what a savepoint or a statement that may fail
half-way keeps to undo itself) are kept in memory, not in a temp file
(docs/performance-notebook.md, "Statement journals in memory").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import aiosqlite

from ._config import SQLITE_SYNCHRONOUS_ENV

log = logging.getLogger("mailrun.sqlite")

JOURNAL_SIZE_LIMIT = 4 * 1024 * 1024
"""Bytes a WAL is cut back to when it restarts."""

_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


def sqlite_synchronous(environ: Mapping[str, str], *, warn: bool = False) -> str:
    """``MAILRUN_SQLITE_SYNCHRONOUS``: ``FULL`` (unset) or ``NORMAL``; a
    ``ValueError`` naming the variable for anything else. With ``warn`` (a
    process's start), ``NORMAL`` is logged as a WARNING: a process whose
    acknowledgements are not durable must never pass for a normal one."""
    value = environ.get(SQLITE_SYNCHRONOUS_ENV, "").strip().upper() or "FULL"
    if value not in ("FULL", "NORMAL"):
        raise ValueError(
            f"{SQLITE_SYNCHRONOUS_ENV} must be FULL or NORMAL,"
            f" got {environ[SQLITE_SYNCHRONOUS_ENV]!r}"
        )
    if value == "NORMAL" and warn:
        log.warning(
            "%s=NORMAL: commits are not fsynced, acknowledgements are not durable"
            " (a benchmark setting)",
            SQLITE_SYNCHRONOUS_ENV,
        )
    return value


async def connect_sqlite(path: str | Path) -> aiosqlite.Connection:
    """An aiosqlite connection to ``path`` for :func:`runtime.transact`.

    ``isolation_level=None``: the sqlite3 module must not open transactions
    behind our back; every transaction here is explicit. Shared across
    threads (``check_same_thread=False``): its calls run on its own thread,
    and a transaction may run on the event loop's; its users serialise them,
    so the two never overlap.
    """
    return await aiosqlite.connect(path, isolation_level=None, check_same_thread=False)


async def configure_sqlite(db: aiosqlite.Connection) -> None:
    """Durable, bounded settings for a connection (the writer's, or the only one)."""
    # Takes effect only while the database has no table yet: a new file.
    await db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute(f"PRAGMA synchronous = {sqlite_synchronous(os.environ)}")
    await db.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
    # A savepoint (every accept batch has one) or a statement that may fail
    # half-way keeps the original of each page it changes in a statement
    # journal, a temp file by default: a pwrite per page, which made up most
    # of an accept's insert. In memory it is bounded by one transaction's
    # pages and never needed after a crash (the WAL is what recovers).
    await db.execute("PRAGMA temp_store = MEMORY")


async def release_free_pages(db: aiosqlite.Connection, keep: int, *, slack: int = 0) -> int:
    """Give free pages beyond ``keep`` bytes back to the file system, once
    more than ``keep + slack`` bytes are free; the pages released.

    A busy store passes a slack (a steady load frees and reuses about as
    much as it has in flight: moving pages to shrink a file that regrows at
    once is wasted work); an idle one none, so it settles at what it holds
    plus ``keep``. Call it outside any transaction, with the connection to
    oneself. The main file shrinks at the next checkpoint, which this asks
    for (passive: it never waits for readers).
    """
    async with db.execute("PRAGMA auto_vacuum") as cur:
        mode = await cur.fetchone()
    if mode is None or mode[0] != _INCREMENTAL:
        return 0
    async with db.execute("PRAGMA freelist_count") as cur:
        free = await cur.fetchone()
    async with db.execute("PRAGMA page_size") as cur:
        size = await cur.fetchone()
    if free is None or size is None or free[0] * size[0] <= keep + slack:
        return 0
    pages = int(free[0]) - keep // int(size[0])
    # executescript steps the pragma to its end; execute() frees one page.
    await db.executescript(f"PRAGMA incremental_vacuum({pages})")
    async with db.execute("PRAGMA wal_checkpoint(PASSIVE)") as cur:
        await cur.fetchone()
    return pages
