"""The tables of time: the runs' pending timers (an approval's expiry among
them) and the deployments' schedules; migrations 18 and 19, on both
databases. Each step is idempotent on its own."""

from __future__ import annotations

import sqlite3

from ..schema import add_columns, statements

TIMER_KIND = "timer"
"""A ``timer`` row: a run's ``ctx.set_timer``; ``name`` is the timer's name."""
APPROVAL_EXPIRY = "approval"
"""A ``timer`` row of an approval asked with a timeout; ``name`` is its id."""

TIMERS_SCHEMA = """
-- One row per pending timer: (run, kind, name) is unique, so setting a
-- name again moves its timer. ``id`` is new with every set: the message id
-- of the item the timer becomes (``timer:<id>``), so a fire is accepted once.
CREATE TABLE IF NOT EXISTS timer (
  id            TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL,
  run_id        TEXT NOT NULL,
  kind          TEXT NOT NULL,
  name          TEXT NOT NULL,
  due_at        REAL NOT NULL,
  payload       BLOB,
  set_at        REAL NOT NULL,
  UNIQUE (run_id, kind, name)
);
-- The one wake of the timer loop (the earliest due row), and its pages of
-- due rows in the order they fire, read without a sort.
CREATE INDEX IF NOT EXISTS timer_due ON timer (due_at, set_at, id);
CREATE INDEX IF NOT EXISTS timer_by_deployment ON timer (deployment_id)
"""

TIMERS_PG = """
CREATE TABLE IF NOT EXISTS timer (
  id            TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL,
  run_id        TEXT NOT NULL,
  kind          TEXT NOT NULL,
  name          TEXT NOT NULL,
  due_at        DOUBLE PRECISION NOT NULL,
  payload       BYTEA,
  set_at        DOUBLE PRECISION NOT NULL,
  UNIQUE (run_id, kind, name)
);
CREATE INDEX IF NOT EXISTS timer_due ON timer (due_at, set_at, id);
CREATE INDEX IF NOT EXISTS timer_by_deployment ON timer (deployment_id);
ALTER TABLE approval ADD COLUMN IF NOT EXISTS expires_at DOUBLE PRECISION;
"""
"""Migration 18 on PostgreSQL."""


def add_timers(conn: sqlite3.Connection) -> None:
    """Migration 18: the ``timer`` table, and an approval's ``expires_at``
    (NULL: it waits for ever)."""
    for statement in statements(TIMERS_SCHEMA):
        conn.execute(statement)
    add_columns(conn, "approval", {"expires_at": "ALTER TABLE approval ADD COLUMN expires_at REAL"})


SCHEDULES_SCHEMA = """
-- A deployment's schedule: ``every`` seconds, or a ``cron`` expression read
-- in the zone ``tz``. ``next_due`` is its next fire, moved on (conditionally
-- on its old value: one hub fires it) in the transaction that accepts a fire.
CREATE TABLE IF NOT EXISTS schedule (
  id            TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL,
  every         REAL,
  cron          TEXT,
  tz            TEXT NOT NULL DEFAULT 'UTC',
  subject       TEXT NOT NULL DEFAULT '',
  payload       BLOB,
  next_due      REAL NOT NULL,
  created_at    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS schedule_due ON schedule (next_due);
CREATE INDEX IF NOT EXISTS schedule_by_deployment ON schedule (deployment_id)
"""

SCHEDULES_PG = """
CREATE TABLE IF NOT EXISTS schedule (
  id            TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL,
  every         DOUBLE PRECISION,
  cron          TEXT,
  tz            TEXT NOT NULL DEFAULT 'UTC',
  subject       TEXT NOT NULL DEFAULT '',
  payload       BYTEA,
  next_due      DOUBLE PRECISION NOT NULL,
  created_at    DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS schedule_due ON schedule (next_due);
CREATE INDEX IF NOT EXISTS schedule_by_deployment ON schedule (deployment_id);
"""
"""Migration 19 on PostgreSQL."""


def add_schedules(conn: sqlite3.Connection) -> None:
    """Migration 19: the ``schedule`` table."""
    for statement in statements(SCHEDULES_SCHEMA):
        conn.execute(statement)
