"""Small things the inbox keeps: ``meta`` keys (the adopt mark, an older
release's instance id) and the sources of the workflow versions this
sidecar was given."""

from __future__ import annotations

import sqlite3
from typing import Any


def read_meta(conn: sqlite3.Connection, key: str) -> Any:
    """The value of ``key`` (None: not set)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def write_meta(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def read_version(conn: sqlite3.Connection, version: int) -> tuple[str, bytes] | None:
    """``(digest, sources JSON)`` of a version kept here, or None."""
    rows = conn.execute("SELECT digest, sources FROM version WHERE version = ?", (version,))
    return next(((str(d), bytes(s)) for d, s in rows), None)


def keep_version(
    conn: sqlite3.Connection, version: int, digest: str, sources: bytes, now: float
) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO version (version, digest, sources, stored_at) VALUES (?, ?, ?, ?)",
        (version, digest, sources, now),
    )
