"""The hub's store on SQLite (the default, a file in the state dir): one
writer connection, one reader, migrations at open, and a file's schema
version read without opening it."""

from ._store import DEFAULT_BUSY_TIMEOUT as DEFAULT_BUSY_TIMEOUT
from ._store import SqliteStore as SqliteStore
from ._store import pending_migrations as pending_migrations
from ._store import read_version as read_version

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "SqliteStore",
    "pending_migrations",
    "read_version",
]
