"""Migration 21: the sleep row of a deployment whose sidecar fell asleep
(scale to zero), on both databases, and the change feed's rows for it.

``deployment_sleep`` holds one row per asleep deployment: since when, and
when a wake was requested (a version rollout; NULL: none). The row is
inserted by a granted Sleep and deleted by the next Welcome of the
deployment's sidecar, so its presence is the ``asleep`` status. Its
triggers write a ``deployment`` change as it falls asleep and as it wakes,
with the status shown then (``paused`` first), so ``GET /events`` follows
both; and a deployment's other changes (a version, a pause) record
``asleep`` while it is. Each step is idempotent on its own.
"""

from __future__ import annotations

import sqlite3

from runtime.wire import DeploymentStatus

from ..feed import NOW

_PAUSED = DeploymentStatus.PAUSED.value
_ASLEEP = DeploymentStatus.ASLEEP.value
_DELETED = DeploymentStatus.DELETED.value
_DEPLOYED = DeploymentStatus.DEPLOYED.value

_TABLE = """
CREATE TABLE IF NOT EXISTS deployment_sleep (
  deployment_id  TEXT PRIMARY KEY,
  since          REAL NOT NULL,
  wake_requested REAL
)"""

_FELL_ASLEEP = f"""
CREATE TRIGGER IF NOT EXISTS change_deployment_asleep AFTER INSERT ON deployment_sleep
BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at)
  SELECT 'deployment', d.id, d.id,
         CASE WHEN d.paused_at IS NOT NULL THEN '{_PAUSED}' ELSE '{_ASLEEP}' END, {NOW}
  FROM deployment d WHERE d.id = NEW.deployment_id;
END"""

_WOKE = f"""
CREATE TRIGGER IF NOT EXISTS change_deployment_awake AFTER DELETE ON deployment_sleep
BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at)
  SELECT 'deployment', d.id, d.id,
         CASE WHEN d.deleted_at IS NOT NULL THEN '{_DELETED}'
              WHEN d.paused_at IS NOT NULL THEN '{_PAUSED}' ELSE '{_DEPLOYED}' END, {NOW}
  FROM deployment d WHERE d.id = OLD.deployment_id;
END"""

# A deployment's own changes (migration 17's trigger) show its sleep too.
_SHOWN = (
    f"CASE WHEN NEW.deleted_at IS NOT NULL THEN '{_DELETED}'"
    f" WHEN NEW.paused_at IS NOT NULL THEN '{_PAUSED}'"
    " WHEN EXISTS (SELECT 1 FROM deployment_sleep s WHERE s.deployment_id = NEW.id)"
    f" THEN '{_ASLEEP}' ELSE '{_DEPLOYED}' END"
)
_CHANGED = f"""
CREATE TRIGGER IF NOT EXISTS change_deployment_status
AFTER UPDATE OF deleted_at, version, rollout_version, paused_at ON deployment
WHEN NEW.deleted_at IS NOT OLD.deleted_at OR NEW.version IS NOT OLD.version
     OR NEW.rollout_version IS NOT OLD.rollout_version OR NEW.paused_at IS NOT OLD.paused_at
BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at)
  VALUES ('deployment', NEW.id, NEW.id, {_SHOWN}, {NOW});
END"""

SLEEP_PG = f"""
CREATE TABLE IF NOT EXISTS deployment_sleep (
  deployment_id  TEXT PRIMARY KEY,
  since          DOUBLE PRECISION NOT NULL,
  wake_requested DOUBLE PRECISION
);
CREATE OR REPLACE FUNCTION change_deployment() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at)
  VALUES ('deployment', NEW.id, NEW.id, {_SHOWN}, extract(epoch FROM clock_timestamp()));
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION change_deployment_sleep() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO change (kind, row_id, deployment_id, status, at)
    SELECT 'deployment', d.id, d.id,
           CASE WHEN d.paused_at IS NOT NULL THEN '{_PAUSED}' ELSE '{_ASLEEP}' END,
           extract(epoch FROM clock_timestamp())
    FROM deployment d WHERE d.id = NEW.deployment_id;
  ELSE
    INSERT INTO change (kind, row_id, deployment_id, status, at)
    SELECT 'deployment', d.id, d.id,
           CASE WHEN d.deleted_at IS NOT NULL THEN '{_DELETED}'
                WHEN d.paused_at IS NOT NULL THEN '{_PAUSED}' ELSE '{_DEPLOYED}' END,
           extract(epoch FROM clock_timestamp())
    FROM deployment d WHERE d.id = OLD.deployment_id;
  END IF;
  RETURN NULL;
END $f$;
DROP TRIGGER IF EXISTS change_deployment_asleep ON deployment_sleep;
CREATE TRIGGER change_deployment_asleep AFTER INSERT ON deployment_sleep
  FOR EACH ROW EXECUTE FUNCTION change_deployment_sleep();
DROP TRIGGER IF EXISTS change_deployment_awake ON deployment_sleep;
CREATE TRIGGER change_deployment_awake AFTER DELETE ON deployment_sleep
  FOR EACH ROW EXECUTE FUNCTION change_deployment_sleep();
"""
"""Migration 21 on PostgreSQL."""


def add_sleep(conn: sqlite3.Connection) -> None:
    """Migration 21 on SQLite: the ``deployment_sleep`` table, its feed
    triggers, and the deployment's own trigger showing it."""
    conn.execute("DROP TRIGGER IF EXISTS change_deployment_status")
    for statement in (_TABLE, _FELL_ASLEEP, _WOKE, _CHANGED):
        conn.execute(statement)
