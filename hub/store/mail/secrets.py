"""Keys the hub makes once and keeps in its store (``hub_secret``), so that
every hub sharing a PostgreSQL store signs and checks with the same one."""

from __future__ import annotations

import secrets
import time

from ..sql import Tx, sql

REPLY_KEY = "reply_address"
"""The HMAC key of the signed reply addresses (``hub.mailbox.reply_tokens``)."""

_READ = sql("SELECT value FROM hub_secret WHERE name = ?")
_MAKE = sql(
    "INSERT INTO hub_secret (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
)


def hub_secret(tx: Tx, name: str, size: int = 32) -> bytes:
    """The secret ``name``, made (``size`` random bytes) on first use, inside
    the caller's write transaction: two hubs asking at once get one key."""
    row = tx.fetch_one(_READ, (name,))
    if row is None:
        tx.execute(_MAKE, (name, secrets.token_bytes(size), time.time()))
        row = tx.fetch_one(_READ, (name,))
    assert row is not None
    return bytes(row[0])
