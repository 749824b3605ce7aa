"""How both durable stores (the hub's ``hub.db``, a sidecar's ``inbox.db``) set SQLite up.

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
(docs/performance.md, "Statement journals in memory").
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from ..config import SQLITE_SYNCHRONOUS_ENV

log = logging.getLogger("mailrun.sqlite")

JOURNAL_SIZE_LIMIT = 4 * 1024 * 1024
"""Bytes a WAL is cut back to when it restarts."""

_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


class Synchronous(StrEnum):
    """``PRAGMA synchronous`` as a store may run: ``FULL`` (the default:
    every acknowledged commit is on disk) or ``NORMAL`` (for benchmarks)."""

    FULL = "FULL"
    NORMAL = "NORMAL"


def sqlite_synchronous(environ: Mapping[str, str], *, warn: bool = False) -> Synchronous:
    """``MAILRUN_SQLITE_SYNCHRONOUS``: ``FULL`` (unset) or ``NORMAL``; a
    ``ValueError`` naming the variable for anything else. With ``warn`` (a
    process's start), ``NORMAL`` is logged as a WARNING: a process whose
    acknowledgements are not durable must never pass for a normal one."""
    value = environ.get(SQLITE_SYNCHRONOUS_ENV, "").strip().upper() or "FULL"
    if value not in Synchronous.__members__:
        raise ValueError(
            f"{SQLITE_SYNCHRONOUS_ENV} must be FULL or NORMAL,"
            f" got {environ[SQLITE_SYNCHRONOUS_ENV]!r}"
        )
    if value == Synchronous.NORMAL and warn:
        log.warning(
            "%s=NORMAL: commits are not fsynced, acknowledgements are not durable"
            " (a benchmark setting)",
            SQLITE_SYNCHRONOUS_ENV,
        )
    return Synchronous(value)


def open_connection(
    path: str | Path,
    *,
    busy_timeout: float,
    synchronous: Synchronous | None,
    query_only: bool = False,
) -> sqlite3.Connection:
    """A ``sqlite3`` connection to ``path``, rows as ``sqlite3.Row``.

    ``synchronous`` set: the durable, bounded settings of a writer (WAL, that
    level, the WAL's size limit, incremental auto-vacuum on a new file,
    statement journals in memory). ``isolation_level=None``: the sqlite3
    module must not open transactions behind our back; every transaction here
    is explicit. ``check_same_thread=False``: its owner runs it on the event
    loop's thread or on a worker thread, one call at a time.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, factory=_Connection)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if query_only:
            conn.execute("PRAGMA query_only = ON")
        if synchronous is not None:
            # Takes effect only while the database has no table yet: a new file.
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {synchronous.value}")
            conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
            # A savepoint (every accept batch has one) or a statement that may
            # fail half-way keeps the original of each page it changes in a
            # statement journal, a temp file by default: a pwrite per page,
            # which made up most of an accept's insert. In memory it is bounded
            # by one transaction's pages and never needed after a crash (the
            # WAL is what recovers).
            conn.execute("PRAGMA temp_store = MEMORY")
    except BaseException:
        conn.close()
        raise
    return conn


class _Connection(sqlite3.Connection):
    """A connection that remembers what :func:`free_pages_over` reads of its
    file that never changes while it is open (``sqlite3.connect``'s
    documented ``factory``)."""

    free_page_bytes: int | None = None
    """A page's size when the file has incremental auto-vacuum, else 0 (None: not read yet)."""


def free_pages_over(conn: sqlite3.Connection, limit: int) -> bool:
    """Whether :func:`release_free_pages` would release anything with
    ``keep + slack == limit``: more than ``limit`` bytes free in a file with
    incremental auto-vacuum. A pragma on the page cache, no I/O: cheap
    enough to ask inside any transaction, so that the worker thread a
    release runs on is asked for only when there is something to release.
    The file's auto-vacuum mode and page size are read once a connection
    (:func:`open_connection`'s): only a ``VACUUM`` changes them, which
    nothing runs on an open store."""
    page = conn.free_page_bytes if isinstance(conn, _Connection) else None
    if page is None:
        (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
        page = int(size) if mode == _INCREMENTAL else 0
        if isinstance(conn, _Connection):
            conn.free_page_bytes = page
    if not page:
        return False
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    return bool(free * page > limit)


def release_free_pages(conn: sqlite3.Connection, keep: int, *, slack: int = 0) -> int:
    """Give free pages beyond ``keep`` bytes back to the file system, once
    more than ``keep + slack`` bytes are free; the pages released.

    A busy store passes a slack (a steady load frees and reuses about as
    much as it has in flight: moving pages to shrink a file that regrows at
    once is wasted work); an idle one none, so it settles at what it holds
    plus ``keep``. Call it outside any transaction. The main file shrinks at
    the next checkpoint, which this asks for (passive: it never waits for
    readers).
    """
    if not free_pages_over(conn, keep + slack):
        return 0
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    pages = int(free) - keep // int(size)
    # executescript steps the pragma to its end; execute() frees one page.
    conn.executescript(f"PRAGMA incremental_vacuum({pages})")
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return pages
