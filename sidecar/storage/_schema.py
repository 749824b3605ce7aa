"""The inbox database's migrations.

``schema_version`` holds one row with the highest applied version. Each
migration runs in one transaction together with its version bump, so a crash
leaves the database either before or after it. Migration 1 creates release
1's tables verbatim (docs/design.md section 6) when they are absent, so a
fresh inbox walks the same path as one release 1 left behind; migrations 2
to 6 extend them (each can run again on what it made: a step's table is
created only if absent). A migration is a plain function of the connection, run
whole between ``BEGIN IMMEDIATE`` and ``COMMIT`` (``Database.transact``).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from functools import partial

from runtime import EnvelopeQuarantined, RecordDecodeError, RunStatus, new_id
from runtime.sqlite import Database

from .._errors import InboxSchemaTooNew
from ._envelope import decode_envelope, salvage_run_id
from ._outbox import add_events, outgoing
from ._recorded import STEP_TABLE

log = logging.getLogger("mailrun.sidecar.inbox")

_V1 = """
CREATE TABLE IF NOT EXISTS inbox (
  dispatch_id TEXT PRIMARY KEY,
  envelope    BLOB NOT NULL,
  state       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run_state (
  run_id TEXT PRIMARY KEY,
  state  BLOB NOT NULL
);
"""

_V2 = """
ALTER TABLE inbox ADD COLUMN run_id TEXT;
ALTER TABLE inbox ADD COLUMN seq INTEGER;
ALTER TABLE inbox ADD COLUMN outcome TEXT;
ALTER TABLE inbox ADD COLUMN received_at REAL;
ALTER TABLE inbox ADD COLUMN processed_at REAL;
CREATE INDEX inbox_pending ON inbox (state, seq);
CREATE TABLE outbox (
  pos      INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id TEXT NOT NULL UNIQUE,
  run_id   TEXT NOT NULL,
  kind     TEXT NOT NULL,
  frame    BLOB NOT NULL,
  acked    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX outbox_unacked ON outbox (pos) WHERE acked = 0;
CREATE TABLE meta (key TEXT PRIMARY KEY, value);
CREATE TABLE run (
  run_id     TEXT PRIMARY KEY,
  status     TEXT NOT NULL,
  result     BLOB,
  error      TEXT,
  last_seq   INTEGER,
  created_at REAL NOT NULL,
  updated_at REAL NOT NULL
);
CREATE TABLE dead_letter (
  id     INTEGER PRIMARY KEY AUTOINCREMENT,
  source TEXT NOT NULL,
  reason TEXT NOT NULL,
  data   BLOB,
  at     REAL NOT NULL
);
INSERT INTO meta (key, value) VALUES ('last_seq', 0);
"""


def _script(conn: sqlite3.Connection, script: str) -> None:
    # executescript would COMMIT the open transaction first; run one by one.
    for statement in filter(None, (s.strip() for s in script.split(";"))):
        conn.execute(statement)


# A run counts the items it processed (the order the hub applies its states
# in) and names the approvals it waits for (the items it holds meanwhile are
# inbox rows in state 'held'); a child run knows its parent and entrypoint.
_V3 = """
ALTER TABLE run ADD COLUMN steps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run ADD COLUMN approvals TEXT;
ALTER TABLE run ADD COLUMN parent_run_id TEXT;
ALTER TABLE run ADD COLUMN entrypoint TEXT;
CREATE INDEX run_children ON run (parent_run_id) WHERE parent_run_id IS NOT NULL;
"""


# Workflow versions: the sources of each version this sidecar was given
# (the restore record holds version 1's), and the version that processed
# each run's latest item (a new one upgrades the state first: migrate_state).
_V4 = """
CREATE TABLE version (
  version   INTEGER PRIMARY KEY,
  digest    TEXT NOT NULL,
  sources   BLOB NOT NULL,
  stored_at REAL NOT NULL
);
ALTER TABLE run ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
"""


# Failure policies: the failed attempts of each item (a handler that
# raised or overran its timeout, or a sidecar that died during its call),
# and the last one's error, which a suspended run or a parked item shows.
_V5 = """
ALTER TABLE inbox ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inbox ADD COLUMN error TEXT;
"""


def _v1(conn: sqlite3.Connection) -> None:
    _script(conn, _V1)


def _v2(conn: sqlite3.Connection) -> None:
    _script(conn, _V2)
    now = time.time()
    # Release 1 envelopes carry no run id: it is their address.
    backfill: list[tuple[str, str]] = []
    dead: list[tuple[str, str, bytes, float]] = []
    for dispatch_id, data, state in conn.execute("SELECT dispatch_id, envelope, state FROM inbox"):
        try:
            backfill.append((decode_envelope(bytes(data)).effective_run_id, dispatch_id))
        except RecordDecodeError as exc:
            if state == "pending":
                dead.append((dispatch_id, str(exc), bytes(data), now))
    conn.executemany("UPDATE inbox SET run_id = ? WHERE dispatch_id = ?", backfill)
    # An envelope nobody can read would hold every later one back: keep it
    # aside, visibly: here, and at the hub (the event cancels its dispatch).
    conn.executemany(
        "INSERT INTO dead_letter (source, reason, data, at) VALUES ('inbox:' || ?, ?, ?, ?)",
        dead,
    )
    quarantined = [
        EnvelopeQuarantined(
            event_id=new_id("evt"),
            run_id=salvage_run_id(data),
            at=at,
            dispatch_id=dispatch_id,
            reason=reason,
        )
        for dispatch_id, reason, data, at in dead
    ]
    add_events(conn, map(outgoing, quarantined))
    conn.executemany(
        "UPDATE inbox SET state = 'done', outcome = 'dead_letter' WHERE dispatch_id = ?",
        [(d[0],) for d in dead],
    )
    conn.execute(
        "INSERT OR IGNORE INTO run (run_id, status, created_at, updated_at)"
        " SELECT run_id, ?, ?, ? FROM run_state"
        " UNION SELECT DISTINCT run_id, ?, ?, ? FROM inbox WHERE run_id IS NOT NULL",
        (RunStatus.RUNNING, now, now, RunStatus.RUNNING, now, now),
    )


def _v3(conn: sqlite3.Connection) -> None:
    _script(conn, _V3)


def _v4(conn: sqlite3.Connection) -> None:
    _script(conn, _V4)


def _v5(conn: sqlite3.Connection) -> None:
    _script(conn, _V5)


def _v6(conn: sqlite3.Connection) -> None:
    # Steps: what each ``ctx.step`` of a dispatch being processed returned,
    # kept until the dispatch is consumed (sidecar/storage/_recorded.py).
    conn.execute(STEP_TABLE)


Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: tuple[Migration, ...] = (_v1, _v2, _v3, _v4, _v5, _v6)
SCHEMA_VERSION = len(MIGRATIONS)


async def migrate(db: Database) -> int:
    """Apply what is missing; return the version the database was at before."""
    current = await db.read(schema_version)
    if current > SCHEMA_VERSION:
        raise InboxSchemaTooNew(
            f"inbox schema version {current} is newer than this release ({SCHEMA_VERSION})"
        )
    for version in range(current + 1, SCHEMA_VERSION + 1):
        # Off the loop: release 1's inbox may be large, and nothing else
        # runs while the sidecar boots.
        await db.transact(partial(_apply, version), heavy=True)
        log.info("inbox migrated to schema version %d", version)
    return current


def schema_version(conn: sqlite3.Connection) -> int:
    """The version the database is at (0: a new file); the table is made if need be.

    One read when the table is there (every start but a new inbox's first,
    or release 1's); the table made, and read again, when it is not."""
    try:
        (version,) = conn.execute(_VERSION).fetchone()
    except sqlite3.OperationalError:  # no such table (or a lock: read again below)
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        (version,) = conn.execute(_VERSION).fetchone()
    return int(version) if version is not None else 0


_VERSION = "SELECT MAX(version) FROM schema_version"


def _apply(version: int, conn: sqlite3.Connection) -> None:
    MIGRATIONS[version - 1](conn)
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
