"""Migration 20: what mail that behaves like mail keeps in the hub store.

- ``workflow_run_dispatch.context``: the mail's :class:`runtime.wire.MailContext`
  (msgpack), sent with every delivery of the dispatch.
- ``deployment.mail_settings`` (JSON of :class:`MailSettings`, NULL: the
  defaults) and ``deployment.catch_all_domain`` (the domain of its address
  when the deployment takes mail to any unknown address there, else NULL;
  a unique index keeps one live catch-all per domain; it holds only
  catch-alls, so SQLite never takes it for a scan of the live deployments).
- ``outbound_mail.spec`` (msgpack of the rich parts of a sent mail:
  :class:`hub.store.OutboundSpec`), the bounce columns, and an index
  on ``message_id`` that replies are matched by.
- ``hub_secret``: keys the hub makes once and every hub sharing the store
  uses (the reply addresses' HMAC key).
"""

from __future__ import annotations

import sqlite3

from ..schema import add_columns, statements

_TABLES = """
CREATE TABLE IF NOT EXISTS hub_secret (
  name       TEXT PRIMARY KEY,
  value      BLOB NOT NULL,
  created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS outbound_mail_message_id ON outbound_mail (message_id);
CREATE UNIQUE INDEX IF NOT EXISTS deployment_catch_all ON deployment (catch_all_domain)
  WHERE catch_all_domain IS NOT NULL AND deleted_at IS NULL;
"""

_COLUMNS: dict[str, dict[str, str]] = {
    "workflow_run_dispatch": {"context": "BLOB"},
    "deployment": {"mail_settings": "TEXT", "catch_all_domain": "TEXT"},
    "outbound_mail": {
        "spec": "BLOB",
        "bounce_source": "TEXT",
        "bounce_status": "TEXT",
        "bounce_diagnostic": "TEXT",
        "bounced_at": "REAL",
    },
}

MAIL_PG = """
ALTER TABLE workflow_run_dispatch ADD COLUMN IF NOT EXISTS context BYTEA;
ALTER TABLE deployment ADD COLUMN IF NOT EXISTS mail_settings TEXT;
ALTER TABLE deployment ADD COLUMN IF NOT EXISTS catch_all_domain TEXT;
ALTER TABLE outbound_mail ADD COLUMN IF NOT EXISTS spec BYTEA;
ALTER TABLE outbound_mail ADD COLUMN IF NOT EXISTS bounce_source TEXT;
ALTER TABLE outbound_mail ADD COLUMN IF NOT EXISTS bounce_status TEXT;
ALTER TABLE outbound_mail ADD COLUMN IF NOT EXISTS bounce_diagnostic TEXT;
ALTER TABLE outbound_mail ADD COLUMN IF NOT EXISTS bounced_at DOUBLE PRECISION;
CREATE TABLE IF NOT EXISTS hub_secret (
  name       TEXT PRIMARY KEY,
  value      BYTEA NOT NULL,
  created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS outbound_mail_message_id ON outbound_mail (message_id);
CREATE UNIQUE INDEX IF NOT EXISTS deployment_catch_all ON deployment (catch_all_domain)
  WHERE catch_all_domain IS NOT NULL AND deleted_at IS NULL;
"""
"""Migration 20 on PostgreSQL."""


def add_mail(conn: sqlite3.Connection) -> None:
    """Migration 20 on SQLite. Idempotent on its own."""
    for table, columns in _COLUMNS.items():
        alters = {
            name: f"ALTER TABLE {table} ADD COLUMN {name} {kind}" for name, kind in columns.items()
        }
        add_columns(conn, table, alters)
    for statement in statements(_TABLES):
        conn.execute(statement)
