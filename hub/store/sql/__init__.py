"""The hub's SQL, declared once per database, and what runs it: statements
(:func:`sql`), the body's view of a transaction (:class:`Tx`), and its
SQLite side (:class:`SqliteTx`); the PostgreSQL side is ``hub.store.pg``."""

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
    "DECLARED",
    "Params",
    "Row",
    "SqliteTx",
    "Statement",
    "Tx",
    "TxBody",
    "json_array",
    "sql",
]
