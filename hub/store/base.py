"""What every hub store offers, whichever database is under it.

Two implementations: :class:`~hub.store.db.SqliteStore` (a file in the
state dir, the default) and ``hub.store.pg.PgStore`` (``--database
postgresql://...``); :func:`~hub.store.opening.open_store` picks one by
its target. Store code never asks which one it has, but for the few
statements that lock rows on PostgreSQL (``reads.is_postgres``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TypeVar

from runtime import Body, Connection

from .blob_io import BlobReader

T = TypeVar("T")


class Store(ABC):
    """The hub database. Open one with ``open_store``; close it with :meth:`aclose`.

    ``db`` is the reader: each read sees what was committed when it ran.
    Writes are transactions (:meth:`transact`), one at a time per process.
    """

    dialect: str
    path: Path | None
    """The SQLite file; None for a server database."""
    db: Connection

    @abstractmethod
    async def transact(self, body: Body[T], *, durable: bool = True, heavy: bool = False) -> T:
        """One write transaction, ``body`` run whole, without a round trip
        through the event loop per statement; its result. ``durable=False``
        may return before the commit is on disk (for a change that is safe
        to lose in a power failure). ``heavy`` says it may take long (large
        bodies): SQLite then runs it off the event loop's thread even when
        it could run on it (``runtime.transact``). Failure to begin or to
        commit is ``StoreUnavailable``, so a caller never mistakes an
        uncommitted change for a committed one."""

    @abstractmethod
    def write(self) -> AbstractAsyncContextManager[Connection]:
        """One write transaction with its body on the loop, a round trip per
        statement (prefer :meth:`transact`); any exception rolls back."""

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
