"""The change feed's rows: one ``change`` row per change of a dispatch, a run
or a deployment, written by triggers (``GET /events`` streams them).

Triggers, not Python: every write path (the acceptor, the wire side, a
deletion, a migration tool) records its changes in the transaction that
makes them, without knowing the feed exists, and a rolled-back transaction
leaves no row. A row is a few columns (no copy of the changed row: the
stream reads its current view when it sends); ``status`` is the one field
copied, so a client that catches up sees each step (reserved, delivered,
processed) and not the latest status three times.

Ids come from AUTOINCREMENT: never reused, even after the newest rows are
trimmed, so an id a client holds (``Last-Event-ID``) means the same change
across hub restarts. A migration that rebuilds one of the three tables
drops its triggers with it and must create them again (:func:`add_change_feed`
is idempotent).

Reading the feed, and trimming it, is ``reading.py``'s.
"""

from __future__ import annotations

import sqlite3
from enum import StrEnum

import msgspec

from runtime.wire import DeploymentStatus

from ..schema import statements


class ChangeKind(StrEnum):
    DISPATCH = "dispatch"
    RUN = "run"
    DEPLOYMENT = "deployment"


class Change(msgspec.Struct, frozen=True):
    id: int
    kind: str
    row_id: str
    deployment_id: str
    status: str | None  # the row's status as this change left it
    at: float


# julianday('now') is fixed for one statement and available on every SQLite
# (unixepoch('subsec') needs 3.42).
NOW = "(julianday('now') - 2440587.5) * 86400.0"
"""SQLite's clock in a statement, as a Unix time: what stamps ``change.at``."""


def _record(kind: ChangeKind, deployment_id: str, status: str) -> str:
    return (
        f"INSERT INTO change (kind, row_id, deployment_id, status, at)"
        f" VALUES ('{kind.value}', NEW.id, {deployment_id}, {status}, {NOW});"
    )


_DEPLOYMENT_STATUS = (
    f"CASE WHEN NEW.deleted_at IS NOT NULL THEN '{DeploymentStatus.DELETED.value}'"
    f" WHEN NEW.paused_at IS NOT NULL THEN '{DeploymentStatus.PAUSED.value}'"
    f" ELSE '{DeploymentStatus.DEPLOYED.value}' END"
)
_DISPATCH = _record(ChangeKind.DISPATCH, "NEW.deployment_id", "NEW.status")
_RUN = _record(ChangeKind.RUN, "NEW.deployment_id", "NEW.status")
_DEPLOYMENT = _record(ChangeKind.DEPLOYMENT, "NEW.id", _DEPLOYMENT_STATUS)

# UPDATE OF fires whenever a column is named in SET, changed or not (a run's
# every DispatchProcessed sets its state and status): the WHEN clauses keep
# only real changes. Anchor runs stand for their deployment, not a run.
_FEED = f"""
CREATE TABLE IF NOT EXISTS change (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  kind          TEXT NOT NULL,
  row_id        TEXT NOT NULL,
  deployment_id TEXT NOT NULL,
  status        TEXT,
  at            REAL NOT NULL
);
CREATE TRIGGER IF NOT EXISTS change_dispatch_new AFTER INSERT ON workflow_run_dispatch
BEGIN {_DISPATCH} END;
CREATE TRIGGER IF NOT EXISTS change_dispatch_status
AFTER UPDATE OF status ON workflow_run_dispatch WHEN NEW.status IS NOT OLD.status
BEGIN {_DISPATCH} END;
CREATE TRIGGER IF NOT EXISTS change_run_new AFTER INSERT ON workflow_run WHEN NEW.is_anchor = 0
BEGIN {_RUN} END;
CREATE TRIGGER IF NOT EXISTS change_run_status
AFTER UPDATE OF status, result, error ON workflow_run
WHEN NEW.is_anchor = 0 AND (NEW.status IS NOT OLD.status OR NEW.result IS NOT OLD.result
                            OR NEW.error IS NOT OLD.error)
BEGIN {_RUN} END;
"""
# A deployment's triggers name ``paused_at`` (migration 17): created by that
# migration, after the column, and so not in migration 11's script.
_DEPLOYMENT_FEED = f"""
CREATE TRIGGER IF NOT EXISTS change_deployment_new AFTER INSERT ON deployment
BEGIN {_DEPLOYMENT} END;
CREATE TRIGGER IF NOT EXISTS change_deployment_status
AFTER UPDATE OF deleted_at, version, rollout_version, paused_at ON deployment
WHEN NEW.deleted_at IS NOT OLD.deleted_at OR NEW.version IS NOT OLD.version
     OR NEW.rollout_version IS NOT OLD.rollout_version OR NEW.paused_at IS NOT OLD.paused_at
BEGIN {_DEPLOYMENT} END;
"""


def _feed_statements(script: str = _FEED) -> list[str]:
    # A trigger's body holds ';': split at "END;" for triggers, at ';' before them.
    table, _, triggers = script.partition("CREATE TRIGGER")
    bodies = ("CREATE TRIGGER" + triggers).split("END;")
    return [*statements(table), *(f"{b.strip()} END" for b in bodies if b.strip())]


def add_change_feed(conn: sqlite3.Connection) -> None:
    """Migration 11: the ``change`` table and the triggers that fill it.
    Changes made before it are not in the feed. Idempotent on its own."""
    for statement in _feed_statements():
        conn.execute(statement)


def add_deployment_feed(conn: sqlite3.Connection) -> None:
    """Migration 17: a deployment's rows in the feed, its pause and unpause
    among its changes (the triggers of a database from before it are
    replaced). Idempotent on its own."""
    conn.execute("DROP TRIGGER IF EXISTS change_deployment_new")
    conn.execute("DROP TRIGGER IF EXISTS change_deployment_status")
    for statement in _feed_statements(_DEPLOYMENT_FEED):
        conn.execute(statement)


DEPLOYMENT_FEED_PG = f"""
CREATE OR REPLACE FUNCTION change_deployment() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at)
  VALUES ('deployment', NEW.id, NEW.id,
          CASE WHEN NEW.deleted_at IS NOT NULL THEN '{DeploymentStatus.DELETED.value}'
               WHEN NEW.paused_at IS NOT NULL THEN '{DeploymentStatus.PAUSED.value}'
               ELSE '{DeploymentStatus.DEPLOYED.value}' END,
          extract(epoch FROM clock_timestamp()));
  RETURN NULL;
END $f$;
DROP TRIGGER IF EXISTS change_deployment_status ON deployment;
CREATE TRIGGER change_deployment_status
  AFTER UPDATE OF deleted_at, version, rollout_version, paused_at ON deployment
  FOR EACH ROW WHEN (NEW.deleted_at IS DISTINCT FROM OLD.deleted_at
                     OR NEW.version IS DISTINCT FROM OLD.version
                     OR NEW.rollout_version IS DISTINCT FROM OLD.rollout_version
                     OR NEW.paused_at IS DISTINCT FROM OLD.paused_at)
  EXECUTE FUNCTION change_deployment();
"""
"""Migration 17's feed part on PostgreSQL."""
