"""Tx: what a transaction's body (or a read's) calls, whichever database is under it.

A body is a plain function of a :class:`Tx`: it runs whole inside one
transaction (``Store.transact``) or one read (``Store.read``), and cannot
await, so it cannot hold the store's writer across anybody else's work.
Its statements are :class:`~hub.store.sql.Statement` values declared at a
module's top level. Errors are the store's own, never a driver's: a
constraint violation is ``StoreConflict``, a database that cannot be
reached or written ``StoreUnavailable``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeAlias, TypeVar

from ._statement import Params, Statement

T = TypeVar("T")


class Row(Protocol):
    """A row read by position and by column name (``sqlite3.Row``, asyncpg's ``Record``)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...

    def keys(self) -> Iterable[str]: ...


class Tx(Protocol):
    """One transaction (or one read) on the store's database."""

    def execute(self, statement: Statement, params: Params = ()) -> int:
        """Run ``statement``; the rows it changed."""
        ...

    def execute_many(self, statement: Statement, rows: Iterable[Params]) -> None:
        """Run ``statement`` once for each of ``rows``."""
        ...

    def fetch_all(self, statement: Statement, params: Params = ()) -> list[Row]:
        """Every row ``statement`` yields."""
        ...

    def fetch_one(self, statement: Statement, params: Params = ()) -> Row | None:
        """The first row ``statement`` yields, or None (a key lookup, an
        aggregate, ``LIMIT 1``)."""
        ...


TxBody: TypeAlias = Callable[[Tx], T]
"""A transaction's body or a read: a plain function of a :class:`Tx`."""
