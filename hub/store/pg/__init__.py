"""The hub's store on PostgreSQL (``--database postgresql://...``): the
SQLite store's interface over psycopg, the schema in PostgreSQL's spelling,
and the translation of the store's SQL."""

from ._conn import Row as Row
from ._sql import translate as translate
from ._store import PgStore as PgStore
from ._store import redact as redact

__all__ = ["PgStore", "Row", "redact", "translate"]
