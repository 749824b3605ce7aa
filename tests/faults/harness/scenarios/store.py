"""Faults in the hub's store and what it holds: the store locked or failing
to commit (F13), a trigger racing its run's completion (F14), claim-checked
bodies corrupted, half fetched or orphaned (F16)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from hub.store import DEFAULT_BUSY_TIMEOUT
from tests.support import wait_for

from ..checker import CheckResult
from ..rounds import Round
from ..workload import body_of
from .common import processed

# --- F13: the hub's store is locked or fails to commit --------------------------------


@asynccontextmanager
async def write_lock(path: Path) -> AsyncIterator[None]:
    """Hold SQLite's write lock on ``path`` from another connection."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    try:
        await anyio.to_thread.run_sync(db.execute, "BEGIN IMMEDIATE")
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(db.execute, "ROLLBACK")
    finally:
        db.close()


async def f13_locked_store(r: Round) -> None:
    hub_pid = r.cluster.hub.pid
    await r.until_accepted(r.rng.uniform(0.15, 0.4))
    async with write_lock(r.cluster.state_dir / "hub.db"):
        await anyio.sleep(DEFAULT_BUSY_TIMEOUT + r.rng.uniform(1.0, 2.0))
    r.over()
    r.expect(r.cluster.hub.pid == hub_pid, "the hub did not survive a locked store")


async def f13_failed_commit(r: Round) -> None:
    async def refused() -> bool:
        return any(op.status == 503 for op in r.workload.history.ops)

    await r.waiting(refused, what="a 503 from a failed commit")
    r.over()


async def f13_verify(r: Round, result: CheckResult) -> None:
    ops = r.workload.history.ops
    if r.fault.hub_failpoints:
        r.injected(any(op.status == 503 for op in ops), "a trigger was refused with 503")
    else:
        # Writers queue behind the lock, each waiting out the busy timeout in
        # turn, so clients time out or get 503: either way, not accepted.
        r.injected(any(op.outcome != "ok" for op in ops), "the lock held a trigger back")
    # Never a false "accepted": every receipt names a dispatch the store holds.
    stored = {
        dsp
        for (dsp,) in r.query(
            "SELECT id FROM workflow_run_dispatch WHERE deployment_id = ?", r.dep_id
        )
    }
    receipts = {str(op.receipt["dispatch_id"]) for op in ops if op.outcome == "ok" and op.receipt}
    r.expect(receipts <= stored, f"receipts the store lacks: {sorted(receipts - stored)[:3]}")


# --- F14: a trigger racing the run's completion ---------------------------------------


async def f14_completion_race(r: Round) -> None:
    proxy = r.sidecar.proxy
    await r.until_accepted(r.rng.uniform(0.2, 0.5))
    # The hub must not learn of the completion for a while: hold the events back.
    held = proxy.add_rule("drop", "mailrun.hub.events.*", direction="to_server")
    stop = await r.cluster.send(r.dep["address"], "stop", message_id=f"{r.dep_id}-stop")
    r.expect(stop.status_code == 202, f"the stop mail was not accepted: {stop.text}")
    run_id = stop.json().get("run_id")

    async def completed_here() -> bool:
        rows = r.sidecar_query("SELECT status FROM run WHERE run_id = ?", run_id)
        return rows == [("completed",)]

    await r.waiting(completed_here, what="the sidecar to complete the run")
    # Triggers racing the completion: accepted by a hub that does not know yet.
    want = r.accepted() + r.load.clients
    total = r.load.total

    async def raced() -> bool:
        return r.accepted() >= min(want, total) or _settled(r) >= total

    await r.waiting(raced, what="triggers accepted after the completion")
    proxy.remove_rule(held)

    async def known() -> bool:
        return bool((await r.cluster.run(run_id))["status"] == "completed")

    r.notes["run_id"] = run_id
    await r.waiting(known, what="the hub to learn of the completion")
    r.over()


def _settled(r: Round) -> int:
    """Mails of the workload settled either way (ok, or a definite 4xx)."""
    ops = r.workload.history.ops
    return len({op.message_id for op in ops if op.outcome == "ok" or op.status == 409})


async def f14_verify(r: Round, result: CheckResult) -> None:
    # Whatever the run did not process, its sender is told why: a retry of the
    # message id is answered workflow_run_terminal, naming the dispatch.
    untold: list[str] = []
    for mid in result.refused:
        # An exact retry (the workload's subject and body): other content
        # would be refused as message_id_reused instead.
        client, n = (int(x) for x in mid.removeprefix("w").split("-"))
        body = body_of(client, n, r.load.pad)
        again = await r.cluster.send(r.dep["address"], mid, body, message_id=mid)
        body = again.json()
        seen = await r.cluster.http.get(f"/dispatches/{body.get('dispatch_id')}")
        if not (
            again.status_code == 409
            and body.get("reason") == "workflow_run_terminal"
            and seen.status_code == 200
            and seen.json().get("last_error") == "workflow_run_terminal"
        ):
            untold.append(f"{mid} ({again.status_code} {body.get('status')})")
    r.injected(bool(result.refused), "a trigger raced the run's completion")
    r.expect(not untold, f"refused, and a retry is not told so: {untold[:3]} of {len(untold)}")
    late = [op for op in r.workload.history.ops if op.status == 409]
    r.expect(
        all((op.receipt or {}).get("reason") == "workflow_run_terminal" for op in late),
        "a 409 other than workflow_run_terminal",
    )
    if "run_id" in r.notes:
        run = await r.cluster.run(r.notes["run_id"])
        r.expect(run["status"] == "completed", f"the run is {run['status']}")


# --- F16: claim-checked bodies: corrupted, half fetched, orphaned ---------------------


async def f16_blobs(r: Round) -> None:
    cluster = r.cluster
    db_path = cluster.state_dir / "hub.db"
    orphan = f"an orphan of {r.dep_id}: stored, never named by a dispatch".encode()
    r.notes["orphan"] = "sha256:" + hashlib.sha256(orphan).hexdigest()
    await _write(db_path, "INSERT INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, 0)",
                 r.notes["orphan"], len(orphan), orphan)  # fmt: skip
    await r.until_accepted(r.rng.uniform(0.2, 0.5))
    # Corrupt the first body before any sidecar has fetched it.
    [(dsp, digest)] = r.query(
        "SELECT id, body_digest FROM workflow_run_dispatch WHERE deployment_id = ?"
        " ORDER BY seq LIMIT 1",
        r.dep_id,
    )
    [(data,)] = r.query("SELECT data FROM blob WHERE digest = ?", digest)
    bad = bytes(data[:-1]) + bytes([data[-1] ^ 0xFF])
    await _write(db_path, "UPDATE blob SET data = ? WHERE digest = ?", bad, digest)
    await r.start_sidecar()

    async def refused() -> bool:
        rows = r.query("SELECT last_error FROM workflow_run_dispatch WHERE id = ?", dsp)
        return bool(rows and (rows[0][0] or "").startswith("digest_mismatch"))

    await r.waiting(refused, what="the sidecar to refuse the corrupted body")

    async def reported() -> bool:
        health = await cluster.healthz() or {}
        return any(u["deployment_id"] == r.dep_id for u in health.get("undeliverable", []))

    await r.waiting(reported, what="/healthz to report the undeliverable dispatch")
    r.expect(processed(r) == 0, "a dispatch was processed past the refused one")
    await _write(db_path, "UPDATE blob SET data = ? WHERE digest = ?", bytes(data), digest)
    # A sidecar killed while fetching a body: fetched in part, never stored.
    chunks = r.sidecar.proxy.add_rule(
        "delay", "_INBOX.>", direction="to_client", delay_ms=500,
        match=lambda frame: len(frame.raw) > 64 * 1024,
    )  # fmt: skip

    async def fetching() -> bool:
        return chunks.hits > 0 or processed(r) >= r.accepted()

    await r.waiting(fetching, what="a body in flight to the sidecar")
    await r.kill_sidecar()
    r.over()
    r.sidecar.proxy.remove_rule(chunks)
    await r.start_sidecar()


async def f16_verify(r: Round, result: CheckResult) -> None:
    runs = r.query(
        "SELECT id FROM workflow_run WHERE deployment_id = ? AND is_top_level = 1", r.dep_id
    )
    state = (await r.cluster.run(runs[0][0]))["state"] or {}
    for item in state.get("seen", []):
        client, n = (int(x) for x in item["subject"].removeprefix("w").split("-"))
        want = hashlib.sha256(body_of(client, n, r.load.pad).encode()).hexdigest()
        r.expect(item["sha256"] == want, f"{item['subject']}: processed a body not sent")

    async def collected() -> bool:
        left = r.query(
            "SELECT COUNT(*) FROM blob WHERE digest = ? OR digest IN (SELECT body_digest"
            " FROM workflow_run_dispatch WHERE deployment_id = ?)",
            r.notes["orphan"],
            r.dep_id,
        )
        return left == [(0,)]

    try:
        await wait_for(collected, timeout=15, what="every blob collected")
    except AssertionError as exc:
        r.expect(False, str(exc))


async def _write(path: Path, sql: str, *args: object) -> None:
    def write() -> None:
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            db.execute(sql, args)
        finally:
            db.close()

    await anyio.to_thread.run_sync(write)
