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
import re
import sqlite3
import time
from enum import StrEnum

import msgspec

from runtime import Connection, is_id, new_id

from .._errors import InvalidName, NameTaken, UnknownProducer
from ..natsauth import new_user_key
from .reads import fetch_all, fetch_one

log = logging.getLogger("mailrun.hub.producers")

# A deployment's name rule (``deployments.NAME_RE``, which this module cannot
# import: migrations import it, and deployments import the store).
_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")


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


async def add_producers(db: Connection) -> None:
    """Migration 10: the ``producer`` table. Idempotent on its own."""
    await db.execute(
        "CREATE TABLE IF NOT EXISTS producer ("
        " id TEXT PRIMARY KEY,"
        " name TEXT NOT NULL,"
        " nats_user TEXT NOT NULL UNIQUE,"
        " created_at REAL NOT NULL,"
        " removed_at REAL)"
    )
    await db.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS producer_live_name ON producer (name)"
        " WHERE removed_at IS NULL"
    )


def validate_producer_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise InvalidName(
            f"invalid producer name {name[:80]!r}: lowercase letter first, then up to 62 "
            "lowercase letters, digits or '-'"
        )


_COLUMNS = "id, name, nats_user, created_at, removed_at"


def _view(row: sqlite3.Row) -> ProducerView:
    status = ProducerStatus.ACTIVE if row["removed_at"] is None else ProducerStatus.REMOVED
    return ProducerView(
        id=row["id"],
        name=row["name"],
        nats_user=row["nats_user"],
        status=status.value,
        created_at=row["created_at"],
        removed_at=row["removed_at"],
    )


async def insert_producer(db: Connection, name: str) -> NewProducer:
    """Inside a write transaction: a producer named ``name`` with a new NATS identity."""
    validate_producer_name(name)
    key = new_user_key()
    producer_id = new_id("prd")
    now = time.time()
    try:
        await db.execute(
            "INSERT INTO producer (id, name, nats_user, created_at) VALUES (?, ?, ?, ?)",
            (producer_id, name, key.public, now),
        )
    except sqlite3.IntegrityError as exc:
        if "producer.name" in str(exc):
            raise NameTaken(f"a producer is already named {name!r}") from exc
        raise
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


async def remove_producer(db: Connection, producer_id: str) -> bool:
    """Inside a write transaction: mark an active producer removed; False
    when it was removed already (idempotent)."""
    cur = await db.execute(
        "UPDATE producer SET removed_at = ? WHERE id = ? AND removed_at IS NULL",
        (time.time(), producer_id),
    )
    removed = cur.rowcount > 0
    if removed:
        log.info("producer removed id=%s", producer_id)
    return removed


async def resolve_producer(db: Connection, key: str) -> str:
    """A producer id from an id or a name (the active one, else the latest removed)."""
    if is_id(key, "prd"):
        rows = await fetch_all(db, "SELECT id FROM producer WHERE id = ?", (key,))
    else:
        rows = await fetch_all(
            db,
            "SELECT id FROM producer WHERE name = ?"
            " ORDER BY removed_at IS NULL DESC, created_at DESC LIMIT 1",
            (key,),
        )
    if not rows:
        raise UnknownProducer(f"no producer {key[:100]!r}")
    return str(rows[0][0])


async def get_producer(db: Connection, key: str) -> ProducerView:
    producer_id = await resolve_producer(db, key)
    row = await fetch_one(db, f"SELECT {_COLUMNS} FROM producer WHERE id = ?", (producer_id,))
    if row is None:
        raise UnknownProducer(f"no producer {key[:100]!r}")
    return _view(row)


async def list_producers(db: Connection, *, status: str | None = None) -> list[ProducerView]:
    """Every producer, or those in ``status`` (a ProducerStatus), oldest first."""
    filters: dict[str | None, str] = {
        None: "",
        ProducerStatus.ACTIVE: " WHERE removed_at IS NULL",
        ProducerStatus.REMOVED: " WHERE removed_at IS NOT NULL",
    }
    where = filters[status]
    rows = await fetch_all(db, f"SELECT {_COLUMNS} FROM producer{where} ORDER BY created_at, id")
    return [_view(row) for row in rows]


async def is_active_producer(db: Connection, producer_id: str) -> bool:
    """Whether ``producer_id`` names a producer that was added and not removed."""
    row = await fetch_one(
        db, "SELECT 1 FROM producer WHERE id = ? AND removed_at IS NULL", (producer_id,)
    )
    return row is not None
