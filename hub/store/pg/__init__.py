"""The hub's store on PostgreSQL (``--database postgresql://...``): the
SQLite store's interface over asyncpg, and a body's statements on it
(``_tx.py``). Its schema is ``hub.store.schema``'s ``postgres.py``."""

from ._store import PgStore as PgStore

__all__ = ["PgStore"]
