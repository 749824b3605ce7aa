"""The inbox itself: opened (migrated) and closed, with its meta and the
workflow versions it keeps; its operations are the classes it is made of."""

from __future__ import annotations

import logging
import sqlite3
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from runtime.errors import TransactionFailed
from runtime.sqlite import Database, Synchronous

from .._meta import keep_version, read_meta, read_version, write_meta
from .._outbox import drop_acknowledged, has_acknowledged
from .._position import highest_seq, read_position
from .._recorded import dispatches_with_steps
from .._schema import migrate
from ._acks import Acks
from ._delivery import Delivery
from ._processing import Processing
from ._search import Search
from ._state import DONE_KEPT

log = logging.getLogger("mailrun.sidecar.inbox")

BUSY_TIMEOUT = 5.0


class Inbox(Delivery, Search, Processing, Acks):
    """The durable inbox (``inbox.db``): every operation of the sidecar on it."""

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        synchronous: Synchronous = Synchronous.FULL,
        done_kept: int = DONE_KEPT,
    ) -> Inbox:
        """The inbox at ``path``, migrated. ``synchronous``: SQLite's
        durability (``FULL``: a processing commit is on disk before its events
        ship, and a stored batch with it at the latest; a
        benchmark may run ``NORMAL``)."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = await Database.open(path, busy_timeout=BUSY_TIMEOUT, synchronous=synchronous)
        try:
            await migrate(db)
            left, last_seq, with_steps, top = await db.read(_opened)
            # Acknowledged rows an older release kept go once: a start that
            # finds none (each after the first) writes nothing.
            if left:
                await db.transact(drop_acknowledged)
        except BaseException:
            await db.aclose()
            raise
        return cls(db, last_seq, done_kept, with_steps, top)

    async def aclose(self) -> None:
        # Shielded: closing runs during cancellation.
        with anyio.CancelScope(shield=True):
            if self._acks:
                try:
                    await self.write_acked()
                except (sqlite3.Error, TransactionFailed) as exc:
                    # Only a resend of events the hub holds: it acknowledges them again.
                    log.warning("acknowledgements not marked on closing: %s", exc)
            async with self._lock:
                await self.db.aclose()

    async def get_meta(self, key: str) -> Any:
        return await self.db.read(partial(read_meta, key=key))

    async def set_meta(self, key: str, value: Any) -> None:
        async with self._lock:
            await self.db.transact(partial(write_meta, key=key, value=value))

    async def get_version(self, version: int) -> tuple[str, bytes] | None:
        """``(digest, sources JSON)`` of a version kept here, or None."""
        return await self.db.read(partial(read_version, version=version))

    async def put_version(self, version: int, digest: str, sources: bytes) -> None:
        kept = partial(keep_version, version=version, digest=digest, sources=sources)
        async with self._lock:
            await self.db.transact(partial(kept, now=time.time()))


def _opened(conn: sqlite3.Connection) -> tuple[bool, int, set[str], int]:
    """What an open reads, in one use of the connection: whether acknowledged
    rows are left, the processing position, the dispatches with recorded
    steps, the highest seq."""
    left = has_acknowledged(conn)
    return left, read_position(conn), dispatches_with_steps(conn), highest_seq(conn)
