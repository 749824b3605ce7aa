"""The fault matrix of issue 3: one ``inject`` per fault, shared by the CI
matrix (``test_matrix.py``, one seed) and the soak (``soak.py``, many).

Every ``inject`` waits until part of the workload is accepted, does its
damage, repairs it and calls ``r.over()``; the round then checks that
nothing accepted was lost, duplicated or reordered. Parameters (when, how
long, how often) come from ``r.rng``, so a seed fixes them. What a fault
must prove beyond the checker is recorded with ``r.expect``.
"""

from __future__ import annotations

import hashlib
import signal
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from hub.store.db import DEFAULT_BUSY_TIMEOUT
from runtime import read_restore_record, record_path
from runtime.testing import CRASH_EXIT_CODE
from tests.support import wait_for

from .checker import CheckResult
from .natsproto import Frame
from .rounds import Fault, Load, Round
from .workload import body_of


def _chance(r: Round, p: float) -> Callable[[Frame], bool]:
    """A rule condition true for a seeded fraction ``p`` of the frames."""
    return lambda frame: r.rng.random() < p


def _crashed(r: Round, what: str, code: int) -> None:
    r.expect(code == CRASH_EXIT_CODE, f"{what} exited {code}, not by its failpoint")


# --- F1, F2: the hub crashes around its commits --------------------------------------


async def f1_publish_crash(r: Round) -> None:
    # The hub is armed to crash at its first publish: reserved dispatches pile
    # up until the sidecar says hello, then the hub dies sending the first.
    await r.until_accepted(r.rng.uniform(0.15, 0.4))
    await r.start_sidecar()
    _crashed(r, "the hub", await r.cluster.hub.wait_exit(timeout=30))
    [(reserved,)] = r.query(
        "SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ? AND status = ?",
        r.dep_id,
        "reserved",
    )
    r.expect(reserved > 0, "no dispatch was left reserved by the crash")
    await r.cluster.start_hub()
    r.over()


async def f2_receipt_crash(r: Round) -> None:
    # Armed to crash after the first accepting commit, before any receipt.
    _crashed(r, "the hub", await r.cluster.hub.wait_exit(timeout=30))
    await anyio.sleep(r.rng.uniform(0.0, 0.5))  # the outage: clients retry into it
    await r.cluster.start_hub()
    r.over()


async def f2_verify(r: Round, result: CheckResult) -> None:
    # The crashed batch: no answer, then the first receipt again on a retry.
    retried = {
        op.message_id
        for op in r.workload.history.by_outcome("ok")
        if op.receipt is not None and op.receipt.get("duplicate")
    }
    r.expect(bool(retried), "no client got its first receipt back on a retry")


# --- F3, F5: lost, duplicated and late frames -----------------------------------------


async def f3_lost_frames(r: Round) -> None:
    p = r.rng.uniform(0.2, 0.5)
    proxy = r.sidecar.proxy
    await r.until_accepted(0.1)
    # Acks first: a lost delivery holds its whole delivery round until the
    # request times out, and no Ack would flow meanwhile to be lost.
    first = proxy.add_rule("drop", "_INBOX.>", direction="to_server", times=1)
    acks = proxy.add_rule("drop", "_INBOX.>", direction="to_server", match=_chance(r, p))
    await anyio.sleep(r.rng.uniform(0.5, 1.0))
    inbound = proxy.add_rule(
        "drop", "mailrun.mail.inbound.>", direction="to_client", match=_chance(r, p / 2)
    )
    await anyio.sleep(r.rng.uniform(0.5, 1.0))
    for rule in (first, acks, inbound):
        proxy.remove_rule(rule)
    r.expect(first.hits > 0, "no Ack was dropped")
    r.over()


async def f5_duplicated_frames(r: Round) -> None:
    p = r.rng.uniform(0.2, 0.5)
    proxy = r.sidecar.proxy
    await r.until_accepted(0.1)
    # The first delivery and the first events frame are duplicated for sure.
    inbound = proxy.add_rule("duplicate", "mailrun.mail.inbound.>", direction="to_client", times=1)
    events = proxy.add_rule("duplicate", "mailrun.hub.events.*", direction="to_server", times=1)
    rules = [
        inbound,
        events,
        # Some deliveries arrive late, after their own retry and later seqs.
        proxy.add_rule(
            "delay", "mailrun.mail.inbound.>", direction="to_client",
            delay_ms=r.rng.randint(100, 400), match=_chance(r, p / 3),
        ),
        proxy.add_rule("duplicate", "mailrun.mail.inbound.>", direction="to_client",
                       match=_chance(r, p)),
        proxy.add_rule("duplicate", "mailrun.hub.events.*", direction="to_server",
                       match=_chance(r, p)),
        proxy.add_rule("duplicate", "_INBOX.>", direction="to_server", match=_chance(r, p)),
    ]  # fmt: skip
    await anyio.sleep(r.rng.uniform(1.0, 2.0))
    for rule in rules:
        proxy.remove_rule(rule)
    r.expect(inbound.hits > 0, "no mail.inbound frame was duplicated")
    r.expect(events.hits > 0, "no events frame was duplicated")
    r.over()


# --- F4, F6, F7: the sidecar dies -----------------------------------------------------


async def f4_inbox_crash(r: Round) -> None:
    # Started late with a backlog: its first batch is stored, never acknowledged.
    await r.until_accepted(r.rng.uniform(0.2, 0.5))
    node = await r.start_sidecar("sidecar.inbox.after_commit=1*crash")
    _crashed(r, "the sidecar", await node.proc.wait_exit(timeout=30))
    [(stored,)] = r.sidecar_query("SELECT COUNT(*) FROM inbox")
    r.expect(stored > 0, "the crash left nothing stored")
    await r.start_sidecar()
    r.over()


async def f6_kill_mid_handler(r: Round) -> None:
    await r.until_accepted(r.rng.uniform(0.15, 0.4))
    r.hold.touch()

    async def entered() -> bool:
        return r.entered.exists()

    await wait_for(entered, what="a handler call to stop at the hold")
    r.expect(await r.kill_sidecar() == -signal.SIGKILL, "the sidecar did not die of SIGKILL")
    r.hold.unlink()
    r.entered.unlink()
    await r.start_sidecar()
    # Once more, wherever it is once it has taken up the work again.
    before = _processed(r)

    async def progressing() -> bool:
        return _processed(r) > before

    await wait_for(progressing, what="the restarted sidecar processing")
    await r.kill_sidecar()
    await r.start_sidecar()
    r.over()


def _processed(r: Round) -> int:
    [(n,)] = r.query(
        "SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ? AND status = ?",
        r.dep_id,
        "processed",
    )
    return int(n)


async def f7_torn_record(r: Round) -> None:
    await r.until_accepted(r.rng.uniform(0.1, 0.4))
    record = record_path(r.cluster.sidecar_root / r.dep_id, r.dep_id)
    before = record.read_bytes()
    node = await r.start_sidecar("sidecar.record.before_rename=1*crash")
    _crashed(r, "the sidecar", await node.proc.wait_exit(timeout=30))
    r.expect(record.read_bytes() == before, "the record changed, though never renamed")
    temps = list(record.parent.glob(".deployment.json.*.tmp"))
    r.expect(len(temps) == 1, f"{len(temps)} temp records beside the record")
    for temp in temps:
        read_restore_record(temp)  # whole: written and fsynced before the crash
    await r.start_sidecar()
    r.over()


# --- F8, F9: nats-server and the hub are killed ---------------------------------------


async def f8_nats_restart(r: Round) -> None:
    hub_pid, sidecar_pid = r.cluster.hub.pid, r.sidecar.proc.pid
    await r.until_accepted(r.rng.uniform(0.15, 0.5))
    r.cluster.nats.kill()
    await anyio.sleep(r.rng.uniform(0.2, 1.5))  # the outage
    await r.cluster.nats.start()
    r.over()
    r.notes["pids"] = (hub_pid, sidecar_pid)


async def f8_verify(r: Round, result: CheckResult) -> None:
    # Nobody waited for an operator: the same processes rode it out.
    r.expect(
        (r.cluster.hub.pid, r.sidecar.proc.pid) == r.notes["pids"],
        "a process had to be restarted",
    )


async def f9_hub_kills(r: Round) -> None:
    kills = r.rng.randint(2, 4)
    await r.until_accepted(0.1)
    for i in range(kills):
        await r.cluster.restart_hub()
        if i < kills - 1:
            await anyio.sleep(r.rng.uniform(1.0, 2.5))  # steady load between kills
    r.over()


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

    await wait_for(refused, what="a 503 from a failed commit")
    r.over()


async def f13_verify(r: Round, result: CheckResult) -> None:
    ops = r.workload.history.ops
    if r.fault.hub_failpoints:
        r.expect(any(op.status == 503 for op in ops), "no trigger was refused with 503")
    else:
        # Writers queue behind the lock, each waiting out the busy timeout in
        # turn, so clients time out or get 503: either way, not accepted.
        r.expect(any(op.outcome != "ok" for op in ops), "the lock delayed no trigger")
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

    await wait_for(completed_here, what="the sidecar to complete the run")
    # Triggers racing the completion: accepted by a hub that does not know yet.
    want = r.accepted() + r.load.clients
    total = r.load.total

    async def raced() -> bool:
        return r.accepted() >= min(want, total) or _settled(r) >= total

    await wait_for(raced, what="triggers accepted after the completion")
    proxy.remove_rule(held)

    async def known() -> bool:
        return bool((await r.cluster.run(run_id))["status"] == "completed")

    await wait_for(known, what="the hub to learn of the completion")
    r.over()
    r.notes["run_id"] = run_id


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
    r.expect(not untold, f"refused, and a retry is not told so: {untold[:3]} of {len(untold)}")
    late = [op for op in r.workload.history.ops if op.status == 409]
    r.expect(
        all((op.receipt or {}).get("reason") == "workflow_run_terminal" for op in late),
        "a 409 other than workflow_run_terminal",
    )
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

    await wait_for(refused, what="the sidecar to refuse the corrupted body")

    async def reported() -> bool:
        health = await cluster.healthz() or {}
        return any(u["deployment_id"] == r.dep_id for u in health.get("undeliverable", []))

    await wait_for(reported, what="/healthz to report the undeliverable dispatch")
    r.expect(_processed(r) == 0, "a dispatch was processed past the refused one")
    await _write(db_path, "UPDATE blob SET data = ? WHERE digest = ?", bytes(data), digest)
    # A sidecar killed while fetching a body: fetched in part, never stored.
    chunks = r.sidecar.proxy.add_rule(
        "delay", "_INBOX.>", direction="to_client", delay_ms=500,
        match=lambda frame: len(frame.raw) > 64 * 1024,
    )  # fmt: skip

    async def fetching() -> bool:
        return chunks.hits > 0 or _processed(r) >= r.accepted()

    await wait_for(fetching, what="a body in flight to the sidecar")
    await r.kill_sidecar()
    r.sidecar.proxy.remove_rule(chunks)
    await r.start_sidecar()
    r.over()


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


# --- F17: the hub cut from NATS while the sidecars stay connected ----------------------


async def f17_hub_partition(r: Round, seconds: float | None = None) -> None:
    hub_pid, sidecar_pid = r.cluster.hub.pid, r.sidecar.proc.pid
    await r.until_accepted(r.rng.uniform(0.1, 0.3))
    duration = seconds if seconds is not None else r.rng.uniform(3.0, 10.0)
    r.cluster.hub_proxy.blackhole()
    await anyio.sleep(duration)
    r.cluster.hub_proxy.heal()
    r.over()
    r.notes["pids"] = (hub_pid, sidecar_pid)


async def f17_inject(r: Round) -> None:
    await f17_hub_partition(r, 10.0)


FAULTS: dict[str, Fault] = {
    f.key: f
    for f in (
        Fault("F1", "hub crash after the dispatch commit, before publish", f1_publish_crash,
              hub_failpoints="hub.dispatch.before_publish=1*crash", start_sidecar=False),
        Fault("F2", "hub crash after the accept commit, before the receipt", f2_receipt_crash,
              hub_failpoints="hub.accept.after_commit=1*crash", verify=f2_verify),
        Fault("F3", "lost Acks and lost mail.inbound frames", f3_lost_frames,
              load=Load(think=0.1)),
        Fault("F4", "sidecar crash after the inbox commit, before the Acks", f4_inbox_crash,
              start_sidecar=False),
        Fault("F5", "duplicated and late mail.inbound, duplicated events", f5_duplicated_frames,
              load=Load(think=0.1)),
        Fault("F6", "sidecar SIGKILL mid-handler", f6_kill_mid_handler),
        Fault("F7", "torn restore record write", f7_torn_record, start_sidecar=False),
        Fault("F8", "nats-server SIGKILL and restart", f8_nats_restart, verify=f8_verify),
        Fault("F9", "hub SIGKILL every few seconds", f9_hub_kills,
              load=Load(mails=20, think=0.15)),
        Fault("F13-lock", "hub.db write-locked beyond the busy timeout", f13_locked_store,
              verify=f13_verify),
        Fault("F13-raise", "accept commits failing", f13_failed_commit,
              hub_failpoints="hub.accept.before_commit=3*raise", verify=f13_verify),
        Fault("F14", "triggers racing the run's completion", f14_completion_race,
              load=Load(mails=20, think=0.15), verify=f14_verify, ignore=("stop",)),
        Fault("F16", "corrupted, half-fetched and orphaned blobs", f16_blobs,
              start_sidecar=False, load=Load(clients=3, mails=6, pad=70_000), verify=f16_verify),
        Fault("F17", "hub cut from NATS, sidecars connected", f17_hub_partition,
              load=Load(think=0.3), verify=f8_verify),
    )
}  # fmt: skip
"""Every fault, by key. F17's duration is random here; the matrix fixes it at 10 s."""
