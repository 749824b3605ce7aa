"""The SQLite steps of the migrations after release 2's schema: columns and
indexes added, each step idempotent on its own; and the tools every step
uses (a script split into statements, columns added where absent).

Migrations whose tables belong to one concern keep their step beside it
(the outbox's, the versions', the producers', the change feed's, the
leases'); these are the steps that only add to tables every concern shares.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping


def statements(script: str) -> list[str]:
    """A DDL script's statements, split at ``;``, its comment lines dropped
    (a script whose statements hold ``;`` themselves, as triggers do, splits
    its own)."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def add_columns(conn: sqlite3.Connection, table: str, columns: Mapping[str, str]) -> None:
    """Each of ``columns`` (name -> its ``ALTER TABLE ... ADD COLUMN``) the
    table lacks: a migration that can run twice."""
    present = {row[0] for row in conn.execute("SELECT name FROM pragma_table_info(?)", (table,))}
    for name, alter in columns.items():
        if name not in present:
            conn.execute(alter)


def add_dead_letter_deployment(conn: sqlite3.Connection) -> None:
    """Migration 3: dead letters name their deployment (quarantined envelopes
    are counted per deployment). Checks before it alters, so it is idempotent
    on its own, not only through ``schema_version``."""
    add_columns(
        conn,
        "dead_letter",
        {"deployment_id": "ALTER TABLE dead_letter ADD COLUMN deployment_id TEXT"},
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS dead_letter_by_deployment ON dead_letter"
        " (deployment_id, source) WHERE deployment_id IS NOT NULL"
    )


def add_owner_home(conn: sqlite3.Connection) -> None:
    """Migration 4: the deployment row names the state directory its owner
    runs from (``owner_home``), so a copy of that directory is told from a
    restart of the owner in it. Rows owned before it keep a NULL home: their
    owner's next hello records one. Idempotent on its own."""
    add_columns(
        conn, "deployment", {"owner_home": "ALTER TABLE deployment ADD COLUMN owner_home TEXT"}
    )


def add_nats_user(conn: sqlite3.Connection) -> None:
    """Migration 5: the deployment row names its NATS identity (``nats_user``,
    the public nkey its sidecar connects with). Rows from before it keep NULL
    until the hub gives them one (docs/security.md). Idempotent on its own."""
    add_columns(
        conn, "deployment", {"nats_user": "ALTER TABLE deployment ADD COLUMN nats_user TEXT"}
    )


def add_retention_indexes(conn: sqlite3.Connection) -> None:
    """Migration 6: the indexes retention prunes by. ``run_event_payload``
    holds only the events that still keep their payload (a run's bounded
    history), so trimming it costs that history, not the run's whole past;
    ``dead_letter_by_source`` finds a source's oldest letters. Idempotent."""
    conn.execute(
        "CREATE INDEX IF NOT EXISTS run_event_payload ON run_event (run_id)"
        " WHERE payload IS NOT NULL"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS dead_letter_by_source ON dead_letter (source, deployment_id)"
    )


def add_run_step(conn: sqlite3.Connection) -> None:
    """Migration 7: ``workflow_run.last_step``, the sidecar's count of the
    run's processed items as of ``state`` (DispatchProcessed.step): an
    approval decision overtakes the items its gate held, so processing order
    is not seq order there, and the state follows the processing order. And
    ``workflow_run.entrypoint``, a child run's handler (from ChildRunStarted),
    for a new owner. Idempotent on its own."""
    add_columns(
        conn,
        "workflow_run",
        {
            "last_step": "ALTER TABLE workflow_run ADD COLUMN last_step INTEGER NOT NULL DEFAULT 0",
            "entrypoint": "ALTER TABLE workflow_run ADD COLUMN entrypoint TEXT",
        },
    )


def add_raw_message(conn: sqlite3.Connection) -> None:
    """Migration 12: ``workflow_run_dispatch.raw_digest`` and ``raw_size``, the
    claim check of the message as it came over SMTP (its bytes in ``blob``
    until the dispatch is settled), and the index blob collection finds
    them by. Idempotent on its own."""
    add_columns(
        conn,
        "workflow_run_dispatch",
        {
            "raw_digest": "ALTER TABLE workflow_run_dispatch ADD COLUMN raw_digest TEXT",
            "raw_size": "ALTER TABLE workflow_run_dispatch ADD COLUMN raw_size INTEGER",
        },
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS dispatch_by_raw ON workflow_run_dispatch (raw_digest)"
        " WHERE raw_digest IS NOT NULL"
    )


def add_inline_digest(conn: sqlite3.Connection) -> None:
    """Migration 14: ``workflow_run_dispatch.inline_digest``, the sha256 of an
    inline body, written when its dispatch is processed (a retry's
    same-content check once the body is trimmed). From here on
    ``body_digest`` names claim-checked bodies only, so its index (which
    blob collection searches) no longer takes a random key for every
    processed mail. Rows processed before keep their digest in
    ``body_digest``. Idempotent on its own."""
    add_columns(
        conn,
        "workflow_run_dispatch",
        {"inline_digest": "ALTER TABLE workflow_run_dispatch ADD COLUMN inline_digest TEXT"},
    )


INLINE_DIGEST_PG = "ALTER TABLE workflow_run_dispatch ADD COLUMN IF NOT EXISTS inline_digest TEXT"
"""Migration 14 on PostgreSQL."""


_FAILURE_COLUMNS = {
    "deployment": {
        "on_failure": "ALTER TABLE deployment ADD COLUMN on_failure TEXT NOT NULL"
        " DEFAULT 'suspend'",
        "max_attempts": "ALTER TABLE deployment ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 5",
        "max_backoff": "ALTER TABLE deployment ADD COLUMN max_backoff REAL NOT NULL DEFAULT 60",
        "handler_timeout": "ALTER TABLE deployment ADD COLUMN handler_timeout REAL NOT NULL"
        " DEFAULT 300",
    },
    "workflow_run": {
        "suspended_at": "ALTER TABLE workflow_run ADD COLUMN suspended_at REAL",
        "failing_dispatch_id": "ALTER TABLE workflow_run ADD COLUMN failing_dispatch_id TEXT",
    },
    "workflow_run_dispatch": {
        "error": "ALTER TABLE workflow_run_dispatch ADD COLUMN error TEXT",
    },
}
# Health and metrics count these, and ``GET /dispatches?status=parked`` lists
# them: few rows each, found without reading every run or dispatch.
_FAILURE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS workflow_run_suspended ON workflow_run (deployment_id)"
    " WHERE status = 'suspended'",
    "CREATE INDEX IF NOT EXISTS dispatch_parked ON workflow_run_dispatch (deployment_id, seq)"
    " WHERE status = 'parked'",
)


def add_failure_policies(conn: sqlite3.Connection) -> None:
    """Migration 16: failure policies. Each deployment's policy
    (``on_failure``, ``max_attempts``, ``max_backoff``, ``handler_timeout``;
    existing ones get the defaults: suspend, 5, 60 s, 300 s), a suspended
    run's ``suspended_at`` and ``failing_dispatch_id``, a dispatch's handler
    ``error`` (parked or failed), and the indexes that find suspended runs
    and parked dispatches. Idempotent on its own."""
    for table, columns in _FAILURE_COLUMNS.items():
        add_columns(conn, table, columns)
    for statement in _FAILURE_INDEXES:
        conn.execute(statement)


FAILURE_POLICIES_PG = """
ALTER TABLE deployment ADD COLUMN IF NOT EXISTS on_failure TEXT NOT NULL DEFAULT 'suspend';
ALTER TABLE deployment ADD COLUMN IF NOT EXISTS max_attempts BIGINT NOT NULL DEFAULT 5;
ALTER TABLE deployment ADD COLUMN IF NOT EXISTS max_backoff DOUBLE PRECISION NOT NULL DEFAULT 60;
ALTER TABLE deployment ADD COLUMN IF NOT EXISTS handler_timeout DOUBLE PRECISION NOT NULL
  DEFAULT 300;
ALTER TABLE workflow_run ADD COLUMN IF NOT EXISTS suspended_at DOUBLE PRECISION;
ALTER TABLE workflow_run ADD COLUMN IF NOT EXISTS failing_dispatch_id TEXT;
ALTER TABLE workflow_run_dispatch ADD COLUMN IF NOT EXISTS error TEXT;
CREATE INDEX IF NOT EXISTS workflow_run_suspended ON workflow_run (deployment_id)
  WHERE status = 'suspended';
CREATE INDEX IF NOT EXISTS dispatch_parked ON workflow_run_dispatch (deployment_id, seq)
  WHERE status = 'parked';
"""
"""Migration 16 on PostgreSQL."""


_RUN_SETTINGS = {
    "paused_at": "ALTER TABLE deployment ADD COLUMN paused_at REAL",
    "max_concurrent_runs": "ALTER TABLE deployment ADD COLUMN max_concurrent_runs INTEGER"
    " NOT NULL DEFAULT 16",
}


def add_run_settings(conn: sqlite3.Connection) -> None:
    """Migration 17: a deployment's ``paused_at`` (NULL: not paused; its
    dispatches are kept, not delivered, while it is set) and its
    ``max_concurrent_runs`` (existing ones get 16). Idempotent on its own."""
    add_columns(conn, "deployment", _RUN_SETTINGS)


RUN_SETTINGS_PG = """
ALTER TABLE deployment ADD COLUMN IF NOT EXISTS paused_at DOUBLE PRECISION;
ALTER TABLE deployment ADD COLUMN IF NOT EXISTS max_concurrent_runs BIGINT NOT NULL DEFAULT 16;
"""
"""Migration 17 on PostgreSQL."""
