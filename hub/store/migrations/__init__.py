"""Schema migrations: one ordered list, each step applied once at boot on
SQLite and on PostgreSQL (``apply.py``), and a hub's SQLite database moved
to PostgreSQL (``transfer.py``, ``mailrun migrate --to``)."""

from .apply import LATEST as LATEST
from .apply import MIGRATIONS as MIGRATIONS
from .apply import Migration as Migration
from .apply import OnStep as OnStep
from .apply import apply_migrations as apply_migrations
from .apply import current_version as current_version
from .apply import migrations_after as migrations_after
from .transfer import transfer as transfer

__all__ = [
    "LATEST",
    "OnStep",
    "migrations_after",
    "transfer",
]
