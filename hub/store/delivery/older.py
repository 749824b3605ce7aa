"""TRANSITIONAL: store functions of the older form (coroutines over
``runtime.Connection`` with SQL text) called from inside a body of the new
form (a plain function of a ``Tx``), until they take a ``Tx`` themselves.

A run's events accept triggers (its mail, its children's items) and record
outgoing mail in the events' own transaction; ``accept_triggers`` and
``record_outbound`` are still coroutines over a connection. Here they get
a connection whose calls run each statement on the body's ``Tx`` at once
(spelled for PostgreSQL by ``hub.store.pg``'s translation where the ``Tx``
is not SQLite's), driven to their end without an event loop
(``runtime.drive``), with a broken constraint raised as the
``sqlite3.IntegrityError`` they catch. Delete this module, and call the two
functions themselves, once they take a ``Tx``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from runtime import Params, drive

from ..._errors import StoreConflict
from ..accept import accept_triggers
from ..outbox import OutboundMail, OutboundStatus, record_outbound
from ..sql import SqliteTx, Statement, Tx
from ..triggers import Outcome, Trigger


def accept_in(tx: Tx, triggers: Sequence[Trigger]) -> tuple[list[Outcome], set[str]]:
    """``accept_triggers`` inside the caller's transaction."""
    return drive(accept_triggers(_Connection(tx), triggers))


def record_outbound_in(tx: Tx, mails: Sequence[OutboundMail], status: OutboundStatus) -> int:
    """``record_outbound`` inside the caller's transaction."""
    return drive(record_outbound(_Connection(tx), mails, status))


class _Done:
    """What ``execute`` returns: the rows it changed."""

    def __init__(self, rowcount: int) -> None:
        self.rowcount = rowcount


class _Connection:
    """``runtime.Connection`` over a ``Tx``: each call runs at once."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx
        self.dialect = "sqlite" if isinstance(tx, SqliteTx) else "postgresql"

    async def execute(self, sql: str, parameters: Params = ()) -> _Done:
        statement = _statement(sql, self.dialect)
        try:
            return _Done(self._tx.execute(statement, parameters))
        except StoreConflict as exc:
            raise sqlite3.IntegrityError(str(exc)) from exc

    async def executemany(self, sql: str, parameters: Iterable[Params]) -> _Done:
        statement = _statement(sql, self.dialect)
        try:
            self._tx.execute_many(statement, parameters)
        except StoreConflict as exc:
            raise sqlite3.IntegrityError(str(exc)) from exc
        return _Done(-1)

    async def execute_fetchall(self, sql: str, parameters: Params = ()) -> list[Any]:
        return self._tx.fetch_all(_statement(sql, self.dialect), parameters)


@lru_cache(maxsize=256)
def _statement(sql: str, dialect: str) -> Statement:
    # Built, not declared: these texts are the older functions' own.
    if dialect == "sqlite":
        return Statement(sql, sql, None, __name__)
    from ..pg import translate

    spelled = translate(sql)
    return Statement(sql, spelled.text, spelled.names, __name__)
