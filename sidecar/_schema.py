"""The inbox database's migrations.

``schema_version`` holds one row with the highest applied version. Each
migration runs in one transaction together with its version bump, so a crash
leaves the database either before or after it. Migration 1 creates release
1's tables verbatim (docs/design.md section 6) when they are absent, so a fresh inbox
walks the same path as one release 1 left behind; migrations 2 and 3 extend
them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiosqlite
import anyio

from runtime import EnvelopeQuarantined, RecordDecodeError, RunStatus, encode, new_id

from ._envelope import decode_envelope, salvage_run_id
from ._errors import InboxSchemaTooNew

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


async def _script(db: aiosqlite.Connection, script: str) -> None:
    # executescript would COMMIT the open transaction first; run one by one.
    for statement in filter(None, (s.strip() for s in script.split(";"))):
        await db.execute(statement)


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


async def _v1(db: aiosqlite.Connection) -> None:
    await _script(db, _V1)


async def _v2(db: aiosqlite.Connection) -> None:
    await _script(db, _V2)
    now = time.time()
    # Release 1 envelopes carry no run id: it is their address.
    backfill: list[tuple[str, str]] = []
    dead: list[tuple[str, str, bytes, float]] = []
    async with db.execute("SELECT dispatch_id, envelope, state FROM inbox") as cur:
        async for dispatch_id, data, state in cur:
            try:
                backfill.append((decode_envelope(bytes(data)).effective_run_id, dispatch_id))
            except RecordDecodeError as exc:
                if state == "pending":
                    dead.append((dispatch_id, str(exc), bytes(data), now))
    await db.executemany("UPDATE inbox SET run_id = ? WHERE dispatch_id = ?", backfill)
    # An envelope nobody can read would hold every later one back: keep it
    # aside, visibly: here, and at the hub (the event cancels its dispatch).
    await db.executemany(
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
    await db.executemany(
        "INSERT INTO outbox (event_id, run_id, kind, frame) VALUES (?, ?, ?, ?)",
        [(e.event_id, e.run_id, type(e).__name__, encode(e)) for e in quarantined],
    )
    await db.executemany(
        "UPDATE inbox SET state = 'done', outcome = 'dead_letter' WHERE dispatch_id = ?",
        [(d[0],) for d in dead],
    )
    await db.execute(
        "INSERT OR IGNORE INTO run (run_id, status, created_at, updated_at)"
        " SELECT run_id, ?, ?, ? FROM run_state"
        " UNION SELECT DISTINCT run_id, ?, ?, ? FROM inbox WHERE run_id IS NOT NULL",
        (RunStatus.RUNNING, now, now, RunStatus.RUNNING, now, now),
    )


async def _v3(db: aiosqlite.Connection) -> None:
    await _script(db, _V3)


async def _v4(db: aiosqlite.Connection) -> None:
    await _script(db, _V4)


@asynccontextmanager
async def transaction(db: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; ``ROLLBACK`` on any error or cancellation.

    The connection runs in autocommit mode (``isolation_level=None``) so these
    statements are the only transaction boundaries; callers serialise access.
    """
    await db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        # Shielded: a cancelled caller must still leave no transaction open.
        with anyio.CancelScope(shield=True):
            await db.execute("ROLLBACK")
        raise
    with anyio.CancelScope(shield=True):
        await db.execute("COMMIT")


Migration = Callable[[aiosqlite.Connection], Awaitable[None]]
MIGRATIONS: tuple[Migration, ...] = (_v1, _v2, _v3, _v4)
SCHEMA_VERSION = len(MIGRATIONS)


async def migrate(db: aiosqlite.Connection) -> int:
    """Apply what is missing; return the version the database was at before."""
    await db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    async with db.execute("SELECT MAX(version) FROM schema_version") as cur:
        row = await cur.fetchone()
    current = int(row[0]) if row is not None and row[0] is not None else 0
    if current > SCHEMA_VERSION:
        raise InboxSchemaTooNew(
            f"inbox schema version {current} is newer than this release ({SCHEMA_VERSION})"
        )
    for version in range(current + 1, SCHEMA_VERSION + 1):
        async with transaction(db):
            await MIGRATIONS[version - 1](db)
            await db.execute("DELETE FROM schema_version")
            await db.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        log.info("inbox migrated to schema version %d", version)
    return current
