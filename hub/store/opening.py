"""Which store a target names: a SQLite file, or a PostgreSQL database by URL."""

from __future__ import annotations

from pathlib import Path

from runtime.sqlite import Synchronous

from .._errors import StoreUnavailable
from .base import Store
from .migrations import OnStep
from .sqlite import DEFAULT_BUSY_TIMEOUT, SqliteStore

DATABASE_ENV = "MAILRUN_DATABASE"
"""The hub's database URL when not the state dir's SQLite file: `mailrun up`
passes ``--database`` to its hub there (a URL may carry a password), never
in argv; sidecars never get it."""


def is_database_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than a SQLite file."""
    return str(target).startswith(("postgresql://", "postgres://"))


async def open_store(
    target: Path | str,
    *,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    synchronous: Synchronous = Synchronous.FULL,
    on_migration: OnStep | None = None,
) -> Store:
    """The store at ``target`` (a SQLite file, created if needed, or a
    ``postgresql://`` URL), migrated; each migration applied is told to
    ``on_migration``. ``synchronous``: SQLite's durability (a benchmark may
    lower it); a server database keeps its own."""
    if not is_database_url(target):
        return await SqliteStore.open(
            Path(target),
            busy_timeout=busy_timeout,
            synchronous=synchronous,
            on_migration=on_migration,
        )
    try:
        from .pg import PgStore
    except ImportError as exc:  # asyncpg comes with the "postgres" extra
        raise StoreUnavailable(
            f"a PostgreSQL database needs asyncpg: pip install 'mailrun[postgres]' ({exc})"
        ) from exc
    return await PgStore.open(str(target), on_migration=on_migration)
