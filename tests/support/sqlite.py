"""Comparing SQLite databases byte for byte, as SQL."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def dump(path: Path) -> list[str]:
    """The database as SQL statements (a read-write connection: like a boot,
    it recovers what a crash left in the journal)."""
    db = sqlite3.connect(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()
