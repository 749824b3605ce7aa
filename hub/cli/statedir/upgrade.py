"""``mailrun migrate``: what an upgrade changes in a state dir, and the hub's part of it.

The hub migrates its own database (here, or at every boot). Each sidecar
migrates its inbox when it starts and rewrites its restore record in this
release's format after a successful start; this module only reports those,
reading the files as they are on disk (the hub never imports sidecar code):
an inbox is in release 1's format when its ``inbox`` table has no ``run_id``
column, a restore record when it has no ``version``. Inspecting opens every
database read-only and changes nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec

from runtime import RecordDecodeError, read_restore_record
from runtime.config import redact_url

from ..._errors import MigrationError, StoreUnavailable
from ...store import (
    LATEST,
    OnStep,
    inbox_format,
    migrations_after,
    open_store,
    pending_migrations,
    postgres_schema_version,
    read_state_file,
    read_version,
    transfer,
)

HUB_DB = "hub.db"
SIDECARS = "sidecars"


class HubDatabase(msgspec.Struct, kw_only=True):
    path: str
    exists: bool
    version: int
    latest: int
    pending: list[str]


class SidecarInbox(msgspec.Struct, kw_only=True):
    deployment_id: str
    path: str
    version: int | None  # None: no schema_version table (release 1)
    release1: bool  # in release 1's format: the sidecar migrates it at its next start
    error: str | None = None


class SidecarRecord(msgspec.Struct, kw_only=True):
    deployment_id: str
    path: str
    version: int | None  # 1: release 1's format, rewritten after the sidecar's next start
    error: str | None = None


class UpgradeReport(msgspec.Struct, kw_only=True):
    hub: HubDatabase
    inboxes: list[SidecarInbox]
    records: list[SidecarRecord]
    applied: list[str] = msgspec.field(default_factory=list)


async def inspect_state(state_dir: Path, sidecar_root: Path | None = None) -> UpgradeReport:
    """What booting this release on ``state_dir`` would change (read-only)."""
    path = state_dir / HUB_DB
    hub = HubDatabase(
        path=str(path),
        exists=path.exists(),
        version=await read_version(path),
        latest=LATEST,
        pending=await pending_migrations(path) if path.exists() else [],
    )
    root = sidecar_root if sidecar_root is not None else state_dir / SIDECARS
    records = sorted(root.glob("*/workflow-runs/*/deployment.json"))
    inbox_files = sorted(root.glob("*/workflow-runs/*/inbox.db"))
    return UpgradeReport(
        hub=hub,
        inboxes=[await anyio.to_thread.run_sync(_inbox, p) for p in inbox_files],
        records=[await anyio.to_thread.run_sync(_record, p) for p in records],
    )


async def migrate_state(
    state_dir: Path, sidecar_root: Path | None = None, on_migration: OnStep | None = None
) -> UpgradeReport:
    """Apply the hub's pending migrations (never creating a database), each
    one told to ``on_migration``; report the rest."""
    before = await inspect_state(state_dir, sidecar_root)
    if not before.hub.exists or not before.hub.pending:
        return before
    try:
        store = await open_store(Path(before.hub.path), on_migration=on_migration)
    except sqlite3.Error as exc:
        raise MigrationError(f"cannot migrate {before.hub.path}: {exc}") from exc
    await store.aclose()
    after = await inspect_state(state_dir, sidecar_root)
    after.applied = [name for name in before.hub.pending if name not in after.hub.pending]
    return after


def _inbox(path: Path) -> SidecarInbox:
    deployment_id = path.parent.name
    try:
        found = read_state_file(path, inbox_format)
    except (sqlite3.Error, StoreUnavailable) as exc:
        return SidecarInbox(
            deployment_id=deployment_id,
            path=str(path),
            version=None,
            release1=False,
            error=str(exc),
        )
    release1 = "inbox" in found.tables and "run_id" not in found.inbox_columns
    return SidecarInbox(
        deployment_id=deployment_id, path=str(path), version=found.version, release1=release1
    )


def _record(path: Path) -> SidecarRecord:
    deployment_id = path.parent.name
    try:
        _, version = read_restore_record(path)
    except (OSError, RecordDecodeError) as exc:
        return SidecarRecord(
            deployment_id=deployment_id, path=str(path), version=None, error=str(exc)
        )
    return SidecarRecord(deployment_id=deployment_id, path=str(path), version=version)


def render(report: UpgradeReport, *, check: bool) -> str:
    """The human report of ``mailrun migrate [--check]``."""
    hub = report.hub
    lines = [f"hub database {hub.path}"]
    if not hub.exists:
        lines.append("  none yet: the hub creates it at its first boot")
    else:
        lines.append(f"  schema version {hub.version} (this release: {hub.latest})")
        if report.applied:
            lines.append(f"  applied: {', '.join(report.applied)}")
        if hub.pending:
            verb = "would apply" if check else "pending"
            lines.append(f"  {verb}: {', '.join(hub.pending)}")
        elif not report.applied:
            lines.append("  up to date")
    lines.append("sidecar inboxes (each sidecar migrates its own when it starts)")
    for inbox in report.inboxes:
        if inbox.error is not None:
            state = f"unreadable: {inbox.error}"
        elif inbox.release1:
            state = "release 1 format: will be migrated"
        else:
            state = f"schema version {inbox.version}"
        lines.append(f"  {inbox.deployment_id}  {state}")
    lines.append("restore records (each sidecar rewrites its own after a successful start)")
    for record in report.records:
        if record.error is not None:
            state = f"unreadable: {record.error}"
        elif record.version == 1:
            state = "release 1 format: will be rewritten"
        else:
            state = f"version {record.version}"
        lines.append(f"  {record.deployment_id}  {state}")
    return "\n".join(lines)


def render_database(
    shown: str, version: int, pending: list[str], applied: list[str], *, check: bool
) -> str:
    """The human report of ``mailrun migrate --database URL [--check]``
    (``shown``: the URL without its password)."""
    if check:
        return f"hub database {shown}: schema version {version} (this release: {LATEST})\n" + (
            f"  pending: {', '.join(pending)}" if pending else "  nothing to migrate"
        )
    done = f"applied: {', '.join(applied)}" if applied else "nothing to migrate"
    return f"hub database {shown}: {done}"


async def move_state(
    state_dir: Path,
    url: str,
    on_migration: OnStep | None = None,
    on_table: Callable[[str, int], object] | None = None,
) -> dict[str, int]:
    """``mailrun migrate --to URL``: the state dir's hub database, migrated,
    copied into the PostgreSQL database at ``url`` (migrated first, and
    empty of hub data); the rows copied per table."""
    path = state_dir / HUB_DB
    if not path.exists():
        raise MigrationError(f"no hub database at {path}")
    await migrate_state(state_dir, None, on_migration)
    target = await open_store(url, on_migration=on_migration)
    await target.aclose()

    try:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            return await transfer(path, conn, on_table)
        finally:
            await conn.close()
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise MigrationError(f"cannot copy into {redact_url(url)}: {exc}") from exc


async def database_state(url: str) -> tuple[int, list[str]]:
    """A PostgreSQL hub database's schema version and the migrations opening
    it would apply (read-only)."""
    import asyncpg

    try:
        conn = await asyncpg.connect(url)
        try:
            version = await postgres_schema_version(conn)
        finally:
            await conn.close()
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise MigrationError(f"cannot read {redact_url(url)}: {exc}") from exc
    if version > LATEST:
        raise MigrationError(f"database schema version {version} is newer than {LATEST}")
    return version, migrations_after(version)


async def migrate_database(url: str, on_migration: OnStep | None = None) -> list[str]:
    """Apply a PostgreSQL hub database's pending migrations; their names."""
    _, pending = await database_state(url)
    store = await open_store(url, on_migration=on_migration)
    await store.aclose()
    return pending
