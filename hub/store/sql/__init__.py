"""The hub's SQL, declared once per database, and what runs it: statements
(:func:`sql`), statements of many rows declared for each group size
(``insert_statement``, ``update_statement``), the body's view of a
transaction (:class:`Tx`), and its SQLite side (:class:`SqliteTx`); the
PostgreSQL side is ``hub.store.pg``."""

from ._bulk import GROUP as GROUP
from ._bulk import SIZES as SIZES
from ._bulk import Grouped as Grouped
from ._bulk import groups as groups
from ._bulk import insert_rows as insert_rows
from ._bulk import insert_statement as insert_statement
from ._bulk import update_rows as update_rows
from ._bulk import update_statement as update_statement
from ._each import each_in_savepoint as each_in_savepoint
from ._sqlite import SqliteTx as SqliteTx
from ._statement import DECLARED as DECLARED
from ._statement import Params as Params
from ._statement import Statement as Statement
from ._statement import json_array as json_array
from ._statement import sql as sql
from ._tx import Row as Row
from ._tx import Tx as Tx
from ._tx import TxBody as TxBody

__all__ = [
    "Tx",
    "each_in_savepoint",
    "update_rows",
    "update_statement",
]
