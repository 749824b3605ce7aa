"""The hub's schema on PostgreSQL: schema 12 at once, its first migration.

PostgreSQL support begins at schema 12: no PostgreSQL database exists at an
earlier version, so migration 1 creates schema 12 there at once
(:data:`BASELINE`, the SQLite schema after migrations 1-12, column for
column), and migrations 2-12 have nothing left to do. Every later migration
gives its PostgreSQL statements beside its SQLite step
(``Migration.postgres``, ``hub.store.migrations``).

Where the spellings differ: ``BIGINT`` for SQLite's ``INTEGER``, ``DOUBLE
PRECISION`` for ``REAL``, ``BYTEA`` for ``BLOB``; ``BIGSERIAL`` where SQLite
numbers rows itself (``dead_letter.id``, ``change.id``), and a ``rowid``
column (``BIGSERIAL``) on the tables whose reads are ordered by SQLite's
implicit rowid (``run_event``, ``outbound_mail``), so those reads are the
same statements; the change feed's triggers in PL/pgSQL.
"""

from __future__ import annotations

BASELINE = """
CREATE TABLE schema_version (version BIGINT NOT NULL);
CREATE TABLE deployment (
  id              TEXT PRIMARY KEY,
  name            TEXT NOT NULL,
  address         TEXT NOT NULL,
  public_key      TEXT NOT NULL UNIQUE,
  sources         TEXT NOT NULL,
  entrypoint      TEXT NOT NULL,
  owner_instance  TEXT,
  owner_epoch     BIGINT NOT NULL DEFAULT 0,
  next_seq        BIGINT NOT NULL DEFAULT 1,
  created_at      DOUBLE PRECISION NOT NULL,
  deleted_at      DOUBLE PRECISION,
  owner_home      TEXT,
  nats_user       TEXT,
  version         BIGINT NOT NULL DEFAULT 1,
  rollout_version BIGINT
);
CREATE TABLE workflow_run (
  id               TEXT PRIMARY KEY,
  deployment_id    TEXT NOT NULL REFERENCES deployment(id),
  parent_run_id    TEXT,
  status           TEXT NOT NULL,
  result           TEXT,
  error            TEXT,
  created_at       DOUBLE PRECISION NOT NULL,
  updated_at       DOUBLE PRECISION NOT NULL,
  is_anchor        BIGINT NOT NULL DEFAULT 0,
  is_top_level     BIGINT NOT NULL DEFAULT 0,
  start_request_id TEXT,
  state            TEXT NOT NULL DEFAULT '{}',
  last_seq         BIGINT NOT NULL DEFAULT 0,
  last_step        BIGINT NOT NULL DEFAULT 0,
  entrypoint       TEXT,
  version          BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE workflow_run_dispatch (
  id            TEXT PRIMARY KEY,
  deployment_id TEXT NOT NULL,
  run_id        TEXT NOT NULL,
  seq           BIGINT NOT NULL,
  kind          TEXT NOT NULL,
  message_id    TEXT,
  sender        TEXT,
  subject       TEXT,
  body          BYTEA,
  body_digest   TEXT,
  body_size     BIGINT NOT NULL DEFAULT 0,
  status        TEXT NOT NULL,
  attempts      BIGINT NOT NULL DEFAULT 0,
  last_error    TEXT,
  created_at    DOUBLE PRECISION NOT NULL,
  delivered_at  DOUBLE PRECISION,
  processed_at  DOUBLE PRECISION,
  version       BIGINT,
  raw_digest    TEXT,
  raw_size      BIGINT
);
CREATE TABLE blob (
  digest     TEXT PRIMARY KEY,
  size       BIGINT NOT NULL,
  data       BYTEA NOT NULL,
  created_at DOUBLE PRECISION NOT NULL
);
ALTER TABLE blob ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE TABLE run_event (
  id            TEXT PRIMARY KEY,
  run_id        TEXT NOT NULL,
  deployment_id TEXT NOT NULL,
  kind          TEXT NOT NULL,
  payload       BYTEA,
  at            DOUBLE PRECISION NOT NULL,
  rowid         BIGSERIAL NOT NULL UNIQUE
);
CREATE TABLE approval (
  id         TEXT PRIMARY KEY,
  run_id     TEXT NOT NULL,
  prompt     TEXT,
  status     TEXT NOT NULL,
  decision   TEXT,
  decided_at DOUBLE PRECISION,
  created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE dead_letter (
  id            BIGSERIAL PRIMARY KEY,
  source        TEXT NOT NULL,
  subject       TEXT,
  reason        TEXT NOT NULL,
  data          BYTEA,
  at            DOUBLE PRECISION NOT NULL,
  deployment_id TEXT
);
CREATE TABLE outbound_mail (
  id              TEXT PRIMARY KEY,
  deployment_id   TEXT NOT NULL,
  run_id          TEXT NOT NULL,
  event_id        TEXT NOT NULL UNIQUE,
  send_key        TEXT NOT NULL,
  message_id      TEXT NOT NULL,
  sender          TEXT NOT NULL,
  recipient       TEXT NOT NULL,
  subject         TEXT NOT NULL,
  body            BYTEA,
  body_size       BIGINT NOT NULL,
  status          TEXT NOT NULL,
  attempts        BIGINT NOT NULL DEFAULT 0,
  in_doubt        BIGINT NOT NULL DEFAULT 0,
  last_error      TEXT,
  relay_answer    TEXT,
  next_attempt_at DOUBLE PRECISION NOT NULL,
  created_at      DOUBLE PRECISION NOT NULL,
  sent_at         DOUBLE PRECISION,
  rowid           BIGSERIAL NOT NULL UNIQUE
);
CREATE TABLE deployment_version (
  deployment_id TEXT NOT NULL,
  version       BIGINT NOT NULL,
  digest        TEXT NOT NULL,
  size          BIGINT NOT NULL,
  entrypoint    TEXT NOT NULL,
  status        TEXT NOT NULL,
  error         TEXT,
  created_at    DOUBLE PRECISION NOT NULL,
  activated_at  DOUBLE PRECISION,
  PRIMARY KEY (deployment_id, version)
);
CREATE TABLE producer (
  id         TEXT PRIMARY KEY,
  name       TEXT NOT NULL,
  nats_user  TEXT NOT NULL UNIQUE,
  created_at DOUBLE PRECISION NOT NULL,
  removed_at DOUBLE PRECISION
);
CREATE TABLE change (
  id            BIGSERIAL PRIMARY KEY,
  kind          TEXT NOT NULL,
  row_id        TEXT NOT NULL,
  deployment_id TEXT NOT NULL,
  status        TEXT,
  at            DOUBLE PRECISION NOT NULL
);
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
CREATE INDEX dispatch_by_raw ON workflow_run_dispatch (raw_digest)
  WHERE raw_digest IS NOT NULL;
CREATE INDEX run_event_by_run ON run_event (run_id, at);
CREATE INDEX run_event_payload ON run_event (run_id) WHERE payload IS NOT NULL;
CREATE INDEX approval_by_run ON approval (run_id);
CREATE INDEX dead_letter_by_deployment ON dead_letter (deployment_id, source)
  WHERE deployment_id IS NOT NULL;
CREATE INDEX dead_letter_by_source ON dead_letter (source, deployment_id);
CREATE UNIQUE INDEX outbound_mail_send_key ON outbound_mail (deployment_id, send_key);
CREATE INDEX outbound_mail_due ON outbound_mail (status, next_attempt_at);
CREATE INDEX outbound_mail_by_deployment ON outbound_mail (deployment_id, created_at);
CREATE INDEX deployment_version_digest ON deployment_version (digest);
CREATE UNIQUE INDEX producer_live_name ON producer (name) WHERE removed_at IS NULL;
CREATE FUNCTION change_dispatch() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at)
  VALUES ('dispatch', NEW.id, NEW.deployment_id, NEW.status,
          extract(epoch FROM clock_timestamp()));
  RETURN NULL;
END $f$;
CREATE FUNCTION change_run() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at)
  VALUES ('run', NEW.id, NEW.deployment_id, NEW.status, extract(epoch FROM clock_timestamp()));
  RETURN NULL;
END $f$;
CREATE FUNCTION change_deployment() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO change (kind, row_id, deployment_id, status, at)
  VALUES ('deployment', NEW.id, NEW.id,
          CASE WHEN NEW.deleted_at IS NULL THEN 'deployed' ELSE 'deleted' END,
          extract(epoch FROM clock_timestamp()));
  RETURN NULL;
END $f$;
CREATE TRIGGER change_dispatch_new AFTER INSERT ON workflow_run_dispatch
  FOR EACH ROW EXECUTE FUNCTION change_dispatch();
CREATE TRIGGER change_dispatch_status AFTER UPDATE OF status ON workflow_run_dispatch
  FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
  EXECUTE FUNCTION change_dispatch();
CREATE TRIGGER change_run_new AFTER INSERT ON workflow_run
  FOR EACH ROW WHEN (NEW.is_anchor = 0) EXECUTE FUNCTION change_run();
CREATE TRIGGER change_run_status AFTER UPDATE OF status, result, error ON workflow_run
  FOR EACH ROW WHEN (NEW.is_anchor = 0 AND (NEW.status IS DISTINCT FROM OLD.status
                     OR NEW.result IS DISTINCT FROM OLD.result
                     OR NEW.error IS DISTINCT FROM OLD.error))
  EXECUTE FUNCTION change_run();
CREATE TRIGGER change_deployment_new AFTER INSERT ON deployment
  FOR EACH ROW EXECUTE FUNCTION change_deployment();
CREATE TRIGGER change_deployment_status
  AFTER UPDATE OF deleted_at, version, rollout_version ON deployment
  FOR EACH ROW WHEN (NEW.deleted_at IS DISTINCT FROM OLD.deleted_at
                     OR NEW.version IS DISTINCT FROM OLD.version
                     OR NEW.rollout_version IS DISTINCT FROM OLD.rollout_version)
  EXECUTE FUNCTION change_deployment();
"""
"""Schema 12 on PostgreSQL, in one script (PostgreSQL's DDL is transactional)."""
