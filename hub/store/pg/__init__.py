"""The hub's store on PostgreSQL (``--database postgresql://...``): the
SQLite store's interface over asyncpg, and the translation of the store's
SQL (the schema is ``schema_pg.py``)."""

from ._sql import Statement as Statement
from ._sql import translate as translate
from ._store import PgStore as PgStore

__all__ = ["PgStore", "Statement", "translate"]
