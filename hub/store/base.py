"""What every hub store offers, whichever database is under it.

Two implementations: :class:`~hub.store.sqlite.SqliteStore` (a file in the
state dir, the default) and ``hub.store.pg.PgStore`` (``--database
postgresql://...``); :func:`~hub.store.opening.open_store` picks one by
its target. Store code never asks which one it has: a statement that the
two databases spell differently says so where it is declared
(``hub.store.sql``).

Bodies of transactions and reads are plain functions of a
:class:`~hub.store.sql.Tx` (:meth:`Store.transact`, :meth:`Store.read`):
a body cannot await, so it cannot hold the writer across anybody else's
work.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TypeVar

from .blob_io import BlobReader
from .sql import TxBody

T = TypeVar("T")


class Store(ABC):
    """The hub database. Open one with ``open_store``; close it with :meth:`aclose`.

    Reads (:meth:`read`) see what was committed when they ran. Writes are
    transactions (:meth:`transact`), one at a time per process.
    """

    dialect: str
    shared: bool
    """Whether the database is a server that other hubs may write at the same
    time (PostgreSQL), not one file one hub holds (SQLite). Two behaviours,
    not spellings, follow from it: the change feed's ids may become visible
    out of order (``feed``'s ``read_feed``), and another hub may be collecting
    a blob while this one names it again (``delivery/blobs.py``'s grace)."""
    path: Path | None
    """The SQLite file; None for a server database."""

    @abstractmethod
    async def transact(self, body: TxBody[T], *, durable: bool = True, heavy: bool = False) -> T:
        """One write transaction, ``body`` run whole, without a round trip
        through the event loop per statement; its result. ``durable=False``
        may return before the commit is on disk (for a change that is safe
        to lose in a power failure). ``heavy`` says it may take long (large
        bodies): SQLite then runs it off the event loop's thread even when
        it could run on it (``runtime.sqlite``). Failure to begin or to
        commit is ``StoreUnavailable``, so a caller never mistakes an
        uncommitted change for a committed one. Once begun, it runs to its
        end whatever happens to the caller."""

    @abstractmethod
    async def read(self, body: TxBody[T], *, heavy: bool = False) -> T:
        """``body`` on the reader: each statement sees what was committed
        when it ran. ``heavy``: a large read, kept off the event loop's thread."""

    @abstractmethod
    def blob_reader(self) -> BlobReader:
        """A reader of blobs in chunks (``blob_io.py``); close it when done."""

    @abstractmethod
    async def release_free_pages(self, keep: int, *, slack: int = 0) -> int:
        """Give storage freed beyond ``keep`` bytes back; the pages released."""

    @abstractmethod
    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
