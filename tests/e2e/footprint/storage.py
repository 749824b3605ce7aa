"""Storage under a steady load: what the hub and a sidecar keep on disk.

Rounds of mails go through a real `mailrun up`; after each, once everything
is settled (every mail processed, the hub's blobs collected, every envelope
compacted at the sidecar, freed pages given back), both databases are
checkpointed (the WAL folded into the file, as SQLite does by itself
anyway) and the bytes of every file are summed: the hub's ``hub.db`` with
its WAL and shared memory, and the sidecar's whole state directory.
``bench/store/storage.py`` prints the figures; ``tests/e2e/footprint/test_storage.py``
checks that they reach a steady state.
"""

from __future__ import annotations

import base64
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from hub.wire import RetentionConfig
from sidecar.storage import FREE_BYTES_KEPT
from tests.support import wait_for

from ..harness import Up, mailrun_up

COUNTER = """
async def main(ctx, item):
    ctx.state["count"] = ctx.state.get("count", 0) + 1
    ctx.state["bytes"] = ctx.state.get("bytes", 0) + len(item.body)
"""


@dataclass(frozen=True)
class Sizes:
    """Bytes on disk after ``mails`` mails, once settled and checkpointed."""

    mails: int
    hub: int
    """hub.db, its WAL and its shared memory file."""
    sidecar: int
    """Every file of the sidecar's state directory."""
    hub_wal: int
    """The hub's WAL as found, before the checkpoint."""
    sidecar_wal: int
    rows: dict[str, int]
    """Row counts that explain the sizes."""
    hub_free: int = 0
    """Free pages in hub.db, kept for reuse (at most ``free_bytes_kept``)."""
    sidecar_free: int = 0
    """Free pages in the inbox, kept for reuse (at most ``FREE_BYTES_KEPT``)."""

    @property
    def hub_live(self) -> int:
        """The hub's bytes without its free pages: what its rows take."""
        return self.hub - self.hub_free

    @property
    def sidecar_live(self) -> int:
        return self.sidecar - self.sidecar_free


@dataclass
class Storage:
    up: Up
    deployment: dict[str, Any]
    sent: int = 0

    @property
    def sidecar_dir(self) -> Path:
        return self.up.state_dir / "sidecars" / self.deployment["id"]

    @property
    def inbox(self) -> Path:
        dep = self.deployment["id"]
        return self.sidecar_dir / "workflow-runs" / dep / "inbox.db"

    @property
    def hub_db(self) -> Path:
        return self.up.state_dir / "hub.db"

    async def send(self, mails: int, size: int, senders: int = 8) -> None:
        """``mails`` mails of ``size`` random bytes each, from ``senders`` at once."""
        todo = iter(range(self.sent, self.sent + mails))

        async def sender() -> None:
            for n in todo:
                body = base64.b64encode(os.urandom(size)).decode()
                mail = {"to": self.deployment["address"], "subject": f"m{n}", "body_b64": body}
                r = await self.up.http.post("/mail", json=mail)
                assert r.status_code == 202, r.text

        async with anyio.create_task_group() as tg:
            for _ in range(senders):
                tg.start_soon(sender)
        self.sent += mails

    async def settle(self, timeout: float = 120.0) -> None:
        """Until every mail sent is processed and retention has done its part."""
        hub_keep = RetentionConfig().free_bytes_kept

        def settled() -> bool:
            hub = _query(
                self.hub_db,
                "SELECT (SELECT COUNT(*) FROM workflow_run_dispatch"
                "        WHERE status IN ('reserved', 'delivered')),"
                " (SELECT COUNT(*) FROM blob"
                "  WHERE digest NOT IN (SELECT digest FROM deployment_version)),"
                " (SELECT COALESCE(MAX(json_extract(state, '$.count')), 0) FROM workflow_run"
                "  WHERE deployment_id = ?)",
                self.deployment["id"],
            )
            inbox = _query(
                self.inbox,
                "SELECT (SELECT COUNT(*) FROM inbox WHERE length(envelope) > 0),"
                " (SELECT COUNT(*) FROM outbox)",
            )
            return (
                hub == (0, 0, self.sent)
                and inbox == (0, 0)
                and _free_bytes(self.hub_db) <= hub_keep
                and _free_bytes(self.inbox) <= FREE_BYTES_KEPT
            )

        await wait_for(settled, timeout=timeout, interval=0.2, what="every mail settled")

    def measure(self) -> Sizes:
        hub_wal = _checkpoint(self.hub_db)
        sidecar_wal = _checkpoint(self.inbox)
        rows = {
            "hub dispatches": _count(self.hub_db, "workflow_run_dispatch"),
            "hub events": _count(self.hub_db, "run_event"),
            "hub events whole": _count(self.hub_db, "run_event", "payload IS NOT NULL"),
            # Bodies: a version's sources are a blob for as long as it exists.
            "hub blobs": _count(
                self.hub_db, "blob", "digest NOT IN (SELECT digest FROM deployment_version)"
            ),
            "inbox rows": _count(self.inbox, "inbox"),
        }
        hub = sum(f.stat().st_size for f in self.up.state_dir.glob("hub.db*"))
        sidecar = sum(f.stat().st_size for f in self.sidecar_dir.rglob("*") if f.is_file())
        return Sizes(
            self.sent,
            hub,
            sidecar,
            hub_wal,
            sidecar_wal,
            rows,
            hub_free=_free_bytes(self.hub_db),
            sidecar_free=_free_bytes(self.inbox),
        )


@asynccontextmanager
async def storage(tmp_path: Path, env: Mapping[str, str] | None = None) -> AsyncIterator[Storage]:
    """A `mailrun up` (``env`` added to its environment) with one deployment
    that counts its mails."""
    async with mailrun_up(tmp_path, env=env) as up:
        dep = await up.deploy("storage", COUNTER)
        yield Storage(up, dep)


async def rounds(
    tmp_path: Path, rounds: int, mails: int, size: int, env: Mapping[str, str] | None = None
) -> list[Sizes]:
    """Sizes after each of ``rounds`` rounds of ``mails`` mails of ``size`` bytes."""
    out: list[Sizes] = []
    async with storage(tmp_path, env) as s:
        for _ in range(rounds):
            await s.send(mails, size)
            await s.settle()
            out.append(s.measure())
    return out


def _query(path: Path, sql: str, *args: Any) -> tuple[Any, ...] | None:
    if not path.exists():
        return None
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        row = db.execute(sql, args).fetchone()
        return tuple(row) if row is not None else None
    except sqlite3.OperationalError:
        return None  # not created yet, or busy: asked again
    finally:
        db.close()


def _count(path: Path, table: str, where: str = "1") -> int:
    row = _query(path, f"SELECT COUNT(*) FROM {table} WHERE {where}")
    return int(row[0]) if row else 0


def _free_bytes(path: Path) -> int:
    row = _query(path, "SELECT f.freelist_count * p.page_size FROM pragma_freelist_count AS f,"
                 " pragma_page_size AS p")  # fmt: skip
    return int(row[0]) if row else 0


def _checkpoint(path: Path, timeout: float = 30.0) -> int:
    """Fold the whole WAL into the database (the file stays, empty); its size before.

    A checkpoint stops short while a reader still uses the WAL: it is tried
    again until it got through all of it."""
    wal = path.with_name(path.name + "-wal")
    before = wal.stat().st_size if wal.exists() else 0
    deadline = time.monotonic() + timeout
    db = sqlite3.connect(path, timeout=10)
    try:
        while True:
            busy, log, done = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy and log == done:
                return before
            if time.monotonic() > deadline:
                raise AssertionError(f"{path}: checkpoint stopped at {done} of {log} frames")
            time.sleep(0.05)
    finally:
        db.close()
