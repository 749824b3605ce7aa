"""SqliteTx: a :class:`~hub.store.sql.Tx` on a ``sqlite3`` connection.

The store runs a body with it on the connection's owner (``runtime.sqlite``'s
``Database``): on the event loop's thread, or on a worker thread when SQLite's
write lock is taken. Each call runs its statement to its end (a statement
left half-read would keep its read snapshot open on the connection).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from ..._errors import StoreConflict, StoreUnavailable
from ._statement import Params, Statement
from ._tx import Row

# Primary result codes of a database that cannot be written or read now (not
# of a statement that is wrong): locked past the busy timeout, read-only, I/O.
_UNAVAILABLE = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
    }
)


def store_error(exc: sqlite3.Error) -> Exception:
    """sqlite3's error as the store's own: a constraint violation is
    ``StoreConflict``, a database that cannot be used now
    ``StoreUnavailable``; any other (a statement that is wrong) as it is."""
    ours: Exception
    if isinstance(exc, sqlite3.IntegrityError):
        ours = StoreConflict(str(exc))
    # The low byte is the primary code of an extended one (BUSY_RECOVERY...).
    elif isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode & 0xFF in _UNAVAILABLE:
        ours = StoreUnavailable(str(exc))
    else:
        return exc
    ours.__cause__ = exc
    return ours


class SqliteTx:
    """A transaction's (or a read's) statements on one ``sqlite3`` connection."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # try/except in each call, not a context manager: it costs nothing unless
    # raised, and these run several times for every mail accepted.
    def execute(self, statement: Statement, params: Params = ()) -> int:
        try:
            return self._conn.execute(statement.sqlite, params).rowcount
        except sqlite3.Error as exc:
            raise store_error(exc)  # noqa: B904 (its cause is set)

    def execute_many(self, statement: Statement, rows: Iterable[Params]) -> None:
        if not rows:  # an empty list or tuple (an iterator is never false)
            return  # nothing to run: no statement looked up, bound and reset
        try:
            self._conn.executemany(statement.sqlite, rows)
        except sqlite3.Error as exc:
            raise store_error(exc)  # noqa: B904 (its cause is set)

    def fetch_all(self, statement: Statement, params: Params = ()) -> list[Row]:
        try:
            # Annotated, not cast: a cast's type is built at every call.
            rows: list[Row] = self._conn.execute(statement.sqlite, params).fetchall()
            return rows
        except sqlite3.Error as exc:
            raise store_error(exc)  # noqa: B904 (its cause is set)

    def fetch_one(self, statement: Statement, params: Params = ()) -> Row | None:
        try:
            cursor = self._conn.execute(statement.sqlite, params)
            try:
                row: Row | None = cursor.fetchone()
                return row
            finally:
                cursor.close()
        except sqlite3.Error as exc:
            raise store_error(exc)  # noqa: B904 (its cause is set)
