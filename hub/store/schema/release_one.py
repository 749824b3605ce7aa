"""Release 1's schema, verbatim, and migration 2, which turns it and its
data into this release's.

Release 1's schema is docs/design.md section 6's; this release's is
docs/architecture.md's, "Hub store".

Migration steps are plain functions of the SQLite connection, run inside
their migration's own transaction (``hub.store.migrations``); their
statements are SQLite's DDL, never run on PostgreSQL, whose schema comes
from its own script (``postgres.py``), so they are not declared with
``sql()``.
"""

from __future__ import annotations

import sqlite3

from runtime import RunStatus
from runtime.failpoints import failpoint
from runtime.wire import DeploymentStatus

from .statuses import DispatchStatus
from .steps import statements

V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS deployment (
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL,
  address     TEXT NOT NULL UNIQUE,
  public_key  TEXT NOT NULL UNIQUE,
  sources     TEXT NOT NULL,
  created_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS workflow_run (
  id            TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL REFERENCES deployment(id),
  parent_run_id TEXT,
  status        TEXT NOT NULL,
  result        TEXT,
  error         TEXT,
  created_at    REAL NOT NULL,
  updated_at    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS workflow_run_dispatch (
  id            TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL,
  address       TEXT NOT NULL,
  kind          TEXT NOT NULL,
  message_id    TEXT,
  sender        TEXT,
  subject       TEXT,
  body          BLOB,
  status        TEXT NOT NULL,
  created_at    REAL NOT NULL
);
"""


def create_v1(conn: sqlite3.Connection) -> None:
    """Migration 1: release 1's schema, exactly, where it is absent."""
    for statement in statements(V1_SCHEMA):
        conn.execute(statement)


# Rebuilt (SQLite's ALTER cannot drop v1's table-wide UNIQUE(address) or
# dispatch's NOT NULL address): create new, copy, drop old, rename.
_V2_TABLES = """
CREATE TABLE deployment_v2 (
  id             TEXT PRIMARY KEY,
  name           TEXT NOT NULL,
  address        TEXT NOT NULL,
  public_key     TEXT NOT NULL UNIQUE,
  sources        TEXT NOT NULL,
  entrypoint     TEXT NOT NULL,
  owner_instance TEXT,
  owner_epoch    INTEGER NOT NULL DEFAULT 0,
  next_seq       INTEGER NOT NULL DEFAULT 1,
  created_at     REAL NOT NULL,
  deleted_at     REAL
);
CREATE TABLE workflow_run_dispatch_v2 (
  id            TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL,
  run_id        TEXT NOT NULL,
  seq           INTEGER NOT NULL,
  kind          TEXT NOT NULL,
  message_id    TEXT,
  sender        TEXT,
  subject       TEXT,
  body          BLOB,
  body_digest   TEXT,
  body_size     INTEGER NOT NULL DEFAULT 0,
  status        TEXT NOT NULL,
  attempts      INTEGER NOT NULL DEFAULT 0,
  last_error    TEXT,
  created_at    REAL NOT NULL,
  delivered_at  REAL,
  processed_at  REAL
);
CREATE TABLE blob (digest TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL,
                   created_at REAL NOT NULL);
CREATE TABLE run_event (id TEXT PRIMARY KEY, run_id TEXT NOT NULL, deployment_id TEXT NOT NULL,
                        kind TEXT NOT NULL, payload BLOB, at REAL NOT NULL);
CREATE TABLE approval (id TEXT PRIMARY KEY, run_id TEXT NOT NULL, prompt TEXT,
                       status TEXT NOT NULL, decision TEXT, decided_at REAL,
                       created_at REAL NOT NULL);
CREATE TABLE dead_letter (id INTEGER PRIMARY KEY, source TEXT NOT NULL, subject TEXT,
                          reason TEXT NOT NULL, data BLOB, at REAL NOT NULL);
ALTER TABLE workflow_run ADD COLUMN is_anchor INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflow_run ADD COLUMN is_top_level INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflow_run ADD COLUMN start_request_id TEXT;
ALTER TABLE workflow_run ADD COLUMN state TEXT NOT NULL DEFAULT '{}';
ALTER TABLE workflow_run ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
"""

_V2_DATA = """
-- a v1 deployment without an anchor row would be unreachable; give it one
INSERT INTO workflow_run (id, deployment_id, status, created_at, updated_at)
  SELECT id, id, :running, created_at, created_at FROM deployment d
  WHERE NOT EXISTS (SELECT 1 FROM workflow_run r WHERE r.id = d.id);
UPDATE workflow_run SET is_anchor = 1 WHERE id = deployment_id;
UPDATE workflow_run SET status = :deployed WHERE is_anchor = 1 AND status = :running;
UPDATE workflow_run SET is_top_level = 1 WHERE is_anchor = 0
  AND id = (SELECT d.address FROM deployment d WHERE d.id = workflow_run.deployment_id);
INSERT INTO deployment_v2 (id, name, address, public_key, sources, entrypoint,
                           created_at, deleted_at)
  SELECT d.id, d.name, d.address, d.public_key, d.sources,
         COALESCE(CASE WHEN json_valid(d.sources)
                       THEN json_extract(d.sources, '$.entrypoint') END, 'flow:main'),
         d.created_at,
         (SELECT a.updated_at FROM workflow_run a WHERE a.id = d.id AND a.status = :deleted)
  FROM deployment d;
-- seq in acceptance (rowid) order; v1 had no unique message_id, so a later
-- duplicate keeps its row but loses the dedupe key the index would refuse
INSERT INTO workflow_run_dispatch_v2 (id, deployment_id, run_id, seq, kind, message_id,
                                      sender, subject, body, body_size, status, created_at)
  SELECT id, deployment_id, address,
         ROW_NUMBER() OVER (PARTITION BY deployment_id ORDER BY rowid), kind,
         CASE WHEN ROW_NUMBER() OVER (PARTITION BY deployment_id, message_id ORDER BY rowid) = 1
              THEN message_id END,
         sender, subject, CAST(body AS BLOB), COALESCE(length(CAST(body AS BLOB)), 0),
         status, created_at
  FROM workflow_run_dispatch ORDER BY rowid;
DROP TABLE deployment;
ALTER TABLE deployment_v2 RENAME TO deployment;
DROP TABLE workflow_run_dispatch;
ALTER TABLE workflow_run_dispatch_v2 RENAME TO workflow_run_dispatch;
UPDATE deployment SET next_seq = 1 + COALESCE(
  (SELECT MAX(seq) FROM workflow_run_dispatch x WHERE x.deployment_id = deployment.id), 0);
-- the highest seq of the run whose every earlier dispatch is settled
UPDATE workflow_run SET last_seq = COALESCE((
  SELECT MAX(d.seq) FROM workflow_run_dispatch d
  WHERE d.run_id = workflow_run.id AND d.status = :processed
    AND NOT EXISTS (SELECT 1 FROM workflow_run_dispatch e WHERE e.run_id = d.run_id
                    AND e.seq < d.seq AND e.status IN (:reserved, :delivered))), 0);
"""

_V2_INDEXES = """
CREATE UNIQUE INDEX deployment_live_name ON deployment (name) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX deployment_live_address ON deployment (address) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX workflow_run_top_level ON workflow_run (deployment_id)
  WHERE is_top_level = 1;
CREATE UNIQUE INDEX workflow_run_start_request ON workflow_run (parent_run_id, start_request_id)
  WHERE start_request_id IS NOT NULL;
CREATE INDEX workflow_run_by_deployment ON workflow_run (deployment_id, created_at);
CREATE UNIQUE INDEX dispatch_seq ON workflow_run_dispatch (deployment_id, seq);
CREATE UNIQUE INDEX dispatch_message_id ON workflow_run_dispatch (deployment_id, message_id)
  WHERE message_id IS NOT NULL;
CREATE INDEX dispatch_pending ON workflow_run_dispatch (deployment_id, status, seq);
CREATE INDEX dispatch_by_run ON workflow_run_dispatch (run_id, seq);
CREATE INDEX dispatch_by_digest ON workflow_run_dispatch (body_digest)
  WHERE body_digest IS NOT NULL;
CREATE INDEX run_event_by_run ON run_event (run_id, at);
CREATE INDEX approval_by_run ON approval (run_id);
"""

_V2_PARAMS = {
    "running": RunStatus.RUNNING.value,  # release 1's live anchor status
    "deployed": DeploymentStatus.DEPLOYED.value,
    "deleted": DeploymentStatus.DELETED.value,
    "processed": DispatchStatus.PROCESSED.value,
    "reserved": DispatchStatus.RESERVED.value,
    "delivered": DispatchStatus.DELIVERED.value,
}


def migrate_v1_to_v2(conn: sqlite3.Connection) -> None:
    """Migration 2: release 1's schema and data into this release's."""
    for statement in statements(_V2_TABLES):
        conn.execute(statement)
    for statement in statements(_V2_DATA):
        names = {k: v for k, v in _V2_PARAMS.items() if f":{k}" in statement}
        conn.execute(statement, names)
    # Release 1's tables are gone by now, uncommitted: a crash here must
    # leave the database at version 1 for the next boot to migrate again.
    failpoint("hub.migration.after_step")
    for statement in statements(_V2_INDEXES):
        conn.execute(statement)
