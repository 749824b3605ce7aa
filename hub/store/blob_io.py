"""Reading claim-checked blobs in chunks, without loading a whole blob.

On SQLite, chunks are read with incremental blob I/O on a read-only
connection of their own, so serving one 512 KiB chunk of a 16 MiB body
reads about 512 KiB (``substr`` on a BLOB column would load the full value
for every chunk). On PostgreSQL, ``substring`` of a column stored
``EXTERNAL`` (uncompressed, out of line) reads only the chunk's pages.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Protocol

import anyio
import anyio.to_thread


class BlobReader(Protocol):
    async def read(self, digest: str, offset: int, length: int) -> tuple[int, bytes] | None:
        """``(size, data)`` of the blob at ``offset``, or None for an unknown digest."""
        ...

    def close(self) -> None: ...


class SqliteBlobReader:
    """A read-only connection used from worker threads, one read at a time."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = anyio.Lock()

    async def read(self, digest: str, offset: int, length: int) -> tuple[int, bytes] | None:
        """``(size, data)`` of the blob at ``offset``, or None for an unknown digest."""
        async with self._lock:
            return await anyio.to_thread.run_sync(self._read, digest, offset, length)

    def _read(self, digest: str, offset: int, length: int) -> tuple[int, bytes] | None:
        if self._conn is None:
            self._conn = sqlite3.connect(
                f"file:{self._path}?mode=ro",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
            )
        conn = self._conn
        # One read transaction: the rowid looked up is the row blob I/O opens.
        conn.execute("BEGIN")
        try:
            row = conn.execute(
                "SELECT rowid, size FROM blob WHERE digest = ?", (digest,)
            ).fetchone()
            if row is None:
                return None
            rowid, size = int(row[0]), int(row[1])
            if offset >= size:
                return size, b""
            with conn.blobopen("blob", "data", rowid, readonly=True) as blob:
                blob.seek(offset)
                return size, blob.read(length)
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
