"""SQLite as both durable stores use it: one connection a store owns
(:class:`Database`), write transactions whose bodies are plain functions run
in one go, and the durable, bounded settings of a writer.

It holds no statement of either store's schema: the hub's SQL lives in
``hub/store/``, the sidecar's in its inbox modules.
"""

from ._database import SLOW_PAUSE as SLOW_PAUSE
from ._database import SLOW_TRANSACTION as SLOW_TRANSACTION
from ._database import Body as Body
from ._database import Database as Database
from ._settings import JOURNAL_SIZE_LIMIT as JOURNAL_SIZE_LIMIT
from ._settings import Synchronous as Synchronous
from ._settings import free_pages_over as free_pages_over
from ._settings import open_connection as open_connection
from ._settings import release_free_pages as release_free_pages
from ._settings import sqlite_synchronous as sqlite_synchronous

__all__ = [
    "JOURNAL_SIZE_LIMIT",
    "SLOW_PAUSE",
    "SLOW_TRANSACTION",
    "Body",
    "Database",
    "Synchronous",
    "free_pages_over",
    "open_connection",
    "release_free_pages",
    "sqlite_synchronous",
]
