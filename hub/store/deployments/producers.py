"""Producers: the identities that may send mail over the NATS ingress.

A producer is a name and a NATS identity (an nkey user): the hub keeps its
public key only, the seed goes to the operator once, when it is added. Its
id names its ingress subject (``<prefix>.ingress.<id>``), which the server's
permissions let only its identity publish on, so the hub takes whatever
arrives there as sent by it (docs/security.md, "Producer identities").
Removing one marks its row (the id is never reused, so old credentials can
never speak for a new producer of the same name); its user leaves the
server's configuration at the next reload.

Names are unique among active producers (a partial unique index: a
concurrent add of the same name loses at INSERT time).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from enum import StrEnum

import msgspec

from runtime import is_id, new_id

from ..._errors import InvalidName, NameTaken, UnknownProducer
from ...natsauth import new_user_key
from ..sql import Row, Statement, Tx, sql
from .lifecycle import NAME_RE

log = logging.getLogger("mailrun.hub.producers")


class ProducerStatus(StrEnum):
    ACTIVE = "active"
    REMOVED = "removed"


class ProducerView(msgspec.Struct, kw_only=True):
    id: str
    name: str
    nats_user: str  # its NATS identity's public nkey
    status: str  # ProducerStatus
    created_at: float
    removed_at: float | None


class NewProducer(msgspec.Struct, kw_only=True):
    """A producer just added, with the seed of its identity: shown this once."""

    producer: ProducerView
    seed: str


def add_producers(conn: sqlite3.Connection) -> None:
    """Migration 10: the ``producer`` table. Idempotent on its own."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS producer ("
        " id TEXT PRIMARY KEY,"
        " name TEXT NOT NULL,"
        " nats_user TEXT NOT NULL UNIQUE,"
        " created_at REAL NOT NULL,"
        " removed_at REAL)"
    )
    conn.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS producer_live_name ON producer (name)"
        " WHERE removed_at IS NULL"
    )


def validate_producer_name(name: str) -> None:
    if not NAME_RE.fullmatch(name):  # a deployment's name rule
        raise InvalidName(
            f"invalid producer name {name[:80]!r}: lowercase letter first, then up to 62 "
            "lowercase letters, digits or '-'"
        )


_COLUMNS = "SELECT id, name, nats_user, created_at, removed_at FROM producer"
# A name taken by an active producer: no row, and no error (which would
# leave a PostgreSQL transaction unusable).
_INSERT = sql(
    "INSERT INTO producer (id, name, nats_user, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)
_REMOVE = sql("UPDATE producer SET removed_at = ? WHERE id = ? AND removed_at IS NULL")
_BY_ID = sql("SELECT id FROM producer WHERE id = ?")
_BY_NAME = sql(
    "SELECT id FROM producer WHERE name = ? ORDER BY removed_at IS NULL DESC, created_at DESC"
    " LIMIT 1"
)
_VIEW = sql(f"{_COLUMNS} WHERE id = ?")
_ALL = sql(f"{_COLUMNS} ORDER BY created_at, id")
_ACTIVE = sql(f"{_COLUMNS} WHERE removed_at IS NULL ORDER BY created_at, id")
_REMOVED = sql(f"{_COLUMNS} WHERE removed_at IS NOT NULL ORDER BY created_at, id")
_IS_ACTIVE = sql("SELECT 1 FROM producer WHERE id = ? AND removed_at IS NULL")


def _view(row: Row) -> ProducerView:
    status = ProducerStatus.ACTIVE if row["removed_at"] is None else ProducerStatus.REMOVED
    return ProducerView(
        id=row["id"],
        name=row["name"],
        nats_user=row["nats_user"],
        status=status.value,
        created_at=row["created_at"],
        removed_at=row["removed_at"],
    )


def insert_producer(tx: Tx, name: str) -> NewProducer:
    """Inside a write transaction: a producer named ``name`` with a new NATS identity."""
    validate_producer_name(name)
    key = new_user_key()
    producer_id = new_id("prd")
    now = time.time()
    # Its id and key are new: only the name can be taken already.
    if tx.execute(_INSERT, (producer_id, name, key.public, now)) != 1:
        raise NameTaken(f"a producer is already named {name!r}")
    log.info("producer added id=%s name=%s nats_user=%s", producer_id, name, key.public)
    view = ProducerView(
        id=producer_id,
        name=name,
        nats_user=key.public,
        status=ProducerStatus.ACTIVE.value,
        created_at=now,
        removed_at=None,
    )
    return NewProducer(producer=view, seed=key.seed)


def remove_producer(tx: Tx, producer_id: str) -> bool:
    """Inside a write transaction: mark an active producer removed; False
    when it was removed already (idempotent)."""
    removed = tx.execute(_REMOVE, (time.time(), producer_id)) > 0
    if removed:
        log.info("producer removed id=%s", producer_id)
    return removed


def resolve_producer(tx: Tx, key: str) -> str:
    """A producer id from an id or a name (the active one, else the latest removed)."""
    row = tx.fetch_one(_BY_ID if is_id(key, "prd") else _BY_NAME, (key,))
    if row is None:
        raise UnknownProducer(f"no producer {key[:100]!r}")
    return str(row[0])


def get_producer(tx: Tx, key: str) -> ProducerView:
    row = tx.fetch_one(_VIEW, (resolve_producer(tx, key),))
    if row is None:
        raise UnknownProducer(f"no producer {key[:100]!r}")
    return _view(row)


def list_producers(tx: Tx, *, status: str | None = None) -> list[ProducerView]:
    """Every producer, or those in ``status`` (a ProducerStatus), oldest first."""
    statements: dict[str | None, Statement] = {
        None: _ALL,
        ProducerStatus.ACTIVE: _ACTIVE,
        ProducerStatus.REMOVED: _REMOVED,
    }
    return [_view(row) for row in tx.fetch_all(statements[status])]


def is_active_producer(tx: Tx, producer_id: str) -> bool:
    """Whether ``producer_id`` names a producer that was added and not removed."""
    return tx.fetch_one(_IS_ACTIVE, (producer_id,)) is not None
