"""The hub's store on PostgreSQL (``--database postgresql://...``): the
SQLite store's interface over asyncpg, a body's statements on it
(``_tx.py``), and, while older code still runs on it, that code's
connections (``_conn.py``, ``_sql.py``). The schema is ``schema_pg.py``."""

from ._store import PgStore as PgStore

__all__ = ["PgStore"]
