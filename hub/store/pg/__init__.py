"""The hub's store on PostgreSQL (``--database postgresql://...``): the
SQLite store's interface over asyncpg, and a body's statements on it
(``_tx.py``). The schema is ``schema_pg.py``."""

from ._store import PgStore as PgStore

__all__ = ["PgStore"]
