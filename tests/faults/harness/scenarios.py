"""The fault matrix (docs/faults.md): one ``inject`` per fault, shared by the
CI matrix (``test_matrix.py``, one seed) and the soak (``soak.py``, many).

Every ``inject`` waits until part of the workload is accepted, does its
damage, repairs it and calls ``r.over()`` (at the kill of a process it then
starts again, or at the end of an outage it imposed); the round then checks
that nothing accepted was lost, duplicated or reordered and that every mail
settled in time. Parameters (when, how long, how often) come from
``r.rng``, so a seed fixes them. What a fault must prove beyond the checker
is recorded with ``r.expect``; the evidence that the fault happened at all
with ``r.injected``, and a state it waits for in vain with ``r.waiting``
(both: not injected, a harness problem).
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from hub.store import DEFAULT_BUSY_TIMEOUT
from runtime import SidecarExit, read_restore_record, record_path
from runtime.config import BACKOFF_MAX_ENV
from runtime.testing import CRASH_EXIT_CODE
from tests.support import wait_for

from .checker import CheckResult
from .cluster import Proc
from .proxy import Frame, NatsFaultProxy, Rule
from .rounds import Fault, Load, NotInjected, Round
from .workload import body_of


def _chance(r: Round, p: float) -> Callable[[Frame], bool]:
    """A rule condition true for a seeded fraction ``p`` of the frames."""
    return lambda frame: r.rng.random() < p


def _crashed(r: Round, what: str, code: int) -> None:
    r.expect(code == CRASH_EXIT_CODE, f"{what} exited {code}, not by its failpoint")


async def _exited(proc: Proc, what: str, timeout: float = 30.0) -> int:
    """The exit code of a process the fault makes exit; NotInjected if it does not."""
    try:
        return await proc.wait_exit(timeout=timeout)
    except TimeoutError:
        raise NotInjected(f"{what} did not exit within {timeout:g}s") from None


# --- F1, F2: the hub crashes around its commits --------------------------------------


async def f1_publish_crash(r: Round) -> None:
    # The hub is armed to crash at its first publish: reserved dispatches pile
    # up until the sidecar says hello, then the hub dies sending the first.
    await r.until_accepted(r.rng.uniform(0.15, 0.4))
    await r.start_sidecar()
    code = await _exited(r.cluster.hub, "the hub armed to crash at its first publish")
    r.over()
    _crashed(r, "the hub", code)
    [(reserved,)] = r.query(
        "SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ? AND status = ?",
        r.dep_id,
        "reserved",
    )
    r.injected(reserved > 0, "dispatches were left reserved by the crash")
    await r.start_hub()


async def f2_receipt_crash(r: Round) -> None:
    # Armed to crash after the first accepting commit, before any receipt.
    code = await _exited(r.cluster.hub, "the hub armed to crash after its first accept")
    _crashed(r, "the hub", code)
    await anyio.sleep(r.rng.uniform(0.0, 0.5))  # the outage: clients retry into it
    r.over()
    await r.start_hub()


async def f2_verify(r: Round, result: CheckResult) -> None:
    # The crashed batch: no answer, then the first receipt again on a retry.
    retried = {
        op.message_id
        for op in r.workload.history.by_outcome("ok")
        if op.receipt is not None and op.receipt.get("duplicate")
    }
    r.injected(bool(retried), "a client got its first receipt back on a retry")


# --- F3, F5: lost, duplicated and late frames -----------------------------------------


async def f3_lost_frames(r: Round) -> None:
    p = r.rng.uniform(0.2, 0.5)
    proxy = r.sidecar.proxy
    await r.until_accepted(0.1)
    # Acks first: a lost delivery holds its whole delivery round until the
    # request times out, and no Ack would flow meanwhile to be lost.
    first = proxy.add_rule("drop", "_INBOX.>", direction="to_server", times=1)
    acks = proxy.add_rule("drop", "_INBOX.>", direction="to_server", match=_chance(r, p))
    await anyio.sleep(r.rng.uniform(0.5, 1.0))  # the fault: Acks lost for a drawn while
    inbound = proxy.add_rule(
        "drop", "mailrun.mail.inbound.>", direction="to_client", match=_chance(r, p / 2)
    )
    await anyio.sleep(r.rng.uniform(0.5, 1.0))  # ... and deliveries too
    r.over()
    for rule in (first, acks, inbound):
        proxy.remove_rule(rule)
    r.injected(first.hits > 0, "an Ack was dropped")


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
    await anyio.sleep(r.rng.uniform(1.0, 2.0))  # the fault's duration
    r.over()
    for rule in rules:
        proxy.remove_rule(rule)
    r.injected(inbound.hits > 0, "a mail.inbound frame was duplicated")
    r.injected(events.hits > 0, "an events frame was duplicated")


# --- F4, F6, F7: the sidecar dies -----------------------------------------------------


async def f4_inbox_crash(r: Round) -> None:
    # Started late with a backlog: its first batch is stored, never acknowledged.
    await r.until_accepted(r.rng.uniform(0.2, 0.5))
    node = await r.start_sidecar("sidecar.inbox.after_commit=1*crash")
    code = await _exited(node.proc, "the sidecar armed to crash after its inbox commit")
    r.over()
    _crashed(r, "the sidecar", code)
    [(stored,)] = r.sidecar_query("SELECT COUNT(*) FROM inbox")
    r.expect(stored > 0, "the crash left nothing stored")
    await r.start_sidecar()


async def f6_kill_mid_handler(r: Round) -> None:
    await r.until_accepted(r.rng.uniform(0.15, 0.4))
    r.hold.touch()

    async def entered() -> bool:
        return r.entered.exists()

    await r.waiting(entered, what="a handler call to stop at the hold")
    r.expect(await r.kill_sidecar() == -signal.SIGKILL, "the sidecar did not die of SIGKILL")
    r.hold.unlink()
    r.entered.unlink()
    await r.start_sidecar()
    # Once more, wherever it is once it has taken up the work again.
    before = _processed(r)

    async def progressing() -> bool:
        return _processed(r) > before

    await r.waiting(progressing, what="the restarted sidecar processing")
    await r.kill_sidecar()
    r.over()
    await r.start_sidecar()


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
    code = await _exited(node.proc, "the sidecar armed to crash before its record's rename")
    r.over()
    _crashed(r, "the sidecar", code)
    r.expect(record.read_bytes() == before, "the record changed, though never renamed")
    temps = list(record.parent.glob(".deployment.json.*.tmp"))
    r.expect(len(temps) == 1, f"{len(temps)} temp records beside the record")
    for temp in temps:
        read_restore_record(temp)  # whole: written and fsynced before the crash
    await r.start_sidecar()


# --- F8, F9: nats-server and the hub are killed ---------------------------------------


def _same_processes(r: Round) -> None:
    """Note the hub's and the sidecar's pids, for :func:`same_processes`."""
    r.notes["pids"] = (r.cluster.hub.pid, r.sidecar.proc.pid)
    r.notes["sidecar_exits"] = len(r.sidecar.proc.exits())


async def same_processes(r: Round, result: CheckResult) -> None:
    # Nobody waited for an operator: the same processes rode it out (a
    # sidecar may have fallen asleep and been woken: never a crash).
    hub, sidecar = r.notes["pids"]
    r.expect(r.cluster.hub.pid == hub, "the hub had to be restarted")
    exits = r.sidecar.proc.exits()[r.notes["sidecar_exits"] :]
    r.expect(
        all(code == SidecarExit.ASLEEP for code in exits)
        and (exits or r.sidecar.proc.pid == sidecar),
        f"the sidecar had to be restarted (exits {exits})",
    )


async def f8_nats_restart(r: Round) -> None:
    _same_processes(r)
    await r.until_accepted(r.rng.uniform(0.15, 0.5))
    r.cluster.nats.kill()
    await anyio.sleep(r.rng.uniform(0.2, 1.5))  # the outage
    r.over()
    await r.cluster.nats.start()


async def f9_hub_kills(r: Round) -> None:
    kills = r.rng.randint(2, 4)
    await r.until_accepted(0.1)
    for i in range(kills):
        await r.kill_hub()
        if i == kills - 1:
            r.over()  # at the last kill: the restart and the new hub's boot count
        await r.start_hub()
        if i < kills - 1:
            await anyio.sleep(r.rng.uniform(1.0, 2.5))  # steady load between kills


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
    r.expect(_processed(r) == 0, "a dispatch was processed past the refused one")
    await _write(db_path, "UPDATE blob SET data = ? WHERE digest = ?", bytes(data), digest)
    # A sidecar killed while fetching a body: fetched in part, never stored.
    chunks = r.sidecar.proxy.add_rule(
        "delay", "_INBOX.>", direction="to_client", delay_ms=500,
        match=lambda frame: len(frame.raw) > 64 * 1024,
    )  # fmt: skip

    async def fetching() -> bool:
        return chunks.hits > 0 or _processed(r) >= r.accepted()

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


# --- F17: the hub cut from NATS while the sidecars stay connected ----------------------


async def f17_hub_partition(r: Round, seconds: float | None = None) -> None:
    _same_processes(r)
    await r.until_accepted(r.rng.uniform(0.1, 0.3))
    duration = seconds if seconds is not None else r.rng.uniform(3.0, 10.0)
    r.cluster.hub_proxy.blackhole()
    await anyio.sleep(duration)
    r.over()
    r.cluster.hub_proxy.heal()


async def f17_inject(r: Round) -> None:
    await f17_hub_partition(r, 7.0)


# --- F10: a sidecar cut from NATS while the hub stays connected ------------------------


async def f10_sidecar_partition(r: Round, seconds: float | None = None) -> None:
    _same_processes(r)
    proxy = r.sidecar.proxy
    await r.until_accepted(r.rng.uniform(0.1, 0.3))
    duration = seconds if seconds is not None else r.rng.uniform(3.0, 10.0)
    before = proxy.count("blackholed")
    proxy.blackhole()
    await anyio.sleep(duration)
    r.over()
    proxy.heal()
    r.injected(proxy.count("blackholed") > before, "the partition swallowed frames")


async def f10_inject(r: Round) -> None:
    await f10_sidecar_partition(r, 6.0)


# --- F11, F12: a process frozen (SIGSTOP), then resumed --------------------------------


async def _frozen(r: Round, proc: Proc, seconds: float) -> None:
    """``proc`` frozen for ``seconds`` under load, as by a stalled VM or a
    long GC pause: its sockets stay open, nobody answers on them."""
    _same_processes(r)
    await r.until_accepted(r.rng.uniform(0.15, 0.4))
    paused_at = r.workload.history.now()
    r.pause(proc)
    await anyio.sleep(seconds)
    r.over()
    r.resume(proc)
    r.notes["paused"] = (paused_at, r.workload.history.now())


async def f11_hub_paused(r: Round, seconds: float | None = None) -> None:
    await _frozen(r, r.cluster.hub, seconds if seconds is not None else r.rng.uniform(2.0, 6.0))


async def f11_inject(r: Round) -> None:
    await f11_hub_paused(r, 5.0)


async def f11_verify(r: Round, result: CheckResult) -> None:
    await same_processes(r, result)
    if "paused" in r.notes:
        # A request the frozen hub held: sent before it was resumed, answered
        # (if ever) after. Sent before the pause counts too: on a busy machine
        # every client may be mid-request at that moment (seed 1 once was).
        _, resumed = r.notes["paused"]
        r.injected(
            any(
                op.invoked < resumed and (op.completed or resumed) >= resumed
                for op in r.workload.history.ops
            ),
            "a client's request waited on the frozen hub",
        )


async def f12_sidecar_paused(r: Round, seconds: float | None = None) -> None:
    seq = _max_seq(r)
    await _frozen(r, r.sidecar.proc, seconds if seconds is not None else r.rng.uniform(2.0, 8.0))
    r.notes["seq"] = seq


async def f12_inject(r: Round) -> None:
    await f12_sidecar_paused(r, 4.0)


async def f12_verify(r: Round, result: CheckResult) -> None:
    await same_processes(r, result)
    # Accepted while the sidecar was frozen: work that had to wait for it.
    r.injected(r.ended_seq > r.notes.get("seq", r.ended_seq), "mail came while it was frozen")


def _max_seq(r: Round) -> int:
    [(seq,)] = r.query(
        "SELECT COALESCE(MAX(seq), 0) FROM workflow_run_dispatch WHERE deployment_id = ?",
        r.dep_id,
    )
    return int(seq)


# --- F15: the deployment moved away from a frozen owner, which then wakes up ------------


async def f15_moved_under_load(r: Round) -> None:
    # A copy of the sidecar's directory before it ever ran (a backup restored
    # elsewhere): the same deployment and key, another home.
    copy = r.scratch / "moved"
    shutil.copytree(r.cluster.sidecar_root / r.dep_id, copy)
    await r.start_sidecar()
    await r.until_accepted(r.rng.uniform(0.2, 0.5))
    r.hold.touch()

    async def entered() -> bool:
        return r.entered.exists()

    await r.waiting(entered, what="a handler call to stop at the hold")
    owner = r.sidecar.proc
    r.pause(owner)  # frozen inside a handler: gone, as far as anyone can tell
    r.over()  # the owner is lost here; the move is the recovery
    r.hold.unlink()
    r.entered.unlink()
    old, _ = r.cluster.move_sidecar(r.dep_id, copy)
    before = _processed(r)

    async def progressing() -> bool:
        return _processed(r) > before

    await r.waiting(progressing, what="the new owner processing")
    # The old owner wakes up mid-handler, with deliveries and a Fenced notice
    # waiting in its socket: it must apply nothing and stop.
    r.resume(owner)
    code = await _exited(old, "the old owner, fenced,", timeout=30)
    r.expect(code == SidecarExit.OWNER_CONFLICT, f"the old owner exited {code}, not fenced")
    r.notes["moved"] = True


async def f15_verify(r: Round, result: CheckResult) -> None:
    [(epoch,)] = r.query("SELECT owner_epoch FROM deployment WHERE id = ?", r.dep_id)
    r.injected(bool(r.notes.get("moved")) and epoch > 0, "ownership moved (a new epoch)")


# --- Long outages, in compressed time ---------------------------------------------------

NATS_OUTAGE = 20 * 60.0
HUB_OUTAGE = 30 * 60.0
"""Seconds of real time each long outage stands for."""


def time_scale(r: Round) -> float:
    """The cluster's ``MAILRUN_BACKOFF_MAX`` (seconds; unset: 1): an outage of
    T seconds lasts T times this. Every retry loop waits at most 1 s between
    attempts (the hub's delivery lanes 2 s), so capped at this it makes at
    least the attempts it would make in T: none skipped, each sooner."""
    return float(r.cluster.env.get(BACKOFF_MAX_ENV, "1"))


def _log_lines(r: Round) -> int:
    """Lines in the hub's and the sidecar's logs so far."""
    paths = (r.cluster.hub.log_path, r.sidecar.proc.log_path)
    return sum(path.read_bytes().count(b"\n") for path in paths if path.exists())


def _counter(proxy: NatsFaultProxy, subject: str) -> tuple[Rule, list[int]]:
    """Count the frames a client publishes on ``subject`` (they pass as ever):
    a rule whose condition counts and never holds."""
    seen = [0]

    def count(frame: Frame) -> bool:
        seen[0] += 1
        return False

    return proxy.add_rule("drop", subject, direction="to_server", match=count), seen


async def _long_outage(r: Round, seconds: float, kill: Callable[[], None]) -> None:
    """Down for ``seconds`` of real time, compressed; notes what the processes
    logged meanwhile (a spinning loop logs thousands of lines a second)."""
    _same_processes(r)
    lines = _log_lines(r)
    kill()
    await anyio.sleep(seconds * time_scale(r))
    r.notes["log_lines"] = _log_lines(r) - lines
    r.notes["outage"] = seconds


async def nats_down_long(r: Round) -> None:
    """nats-server down for 20 minutes: hub and sidecar reconnect all along
    (each attempt a connection their proxies count) and ride it out."""
    await r.until_accepted(r.rng.uniform(0.2, 0.4))
    proxies = {"hub": r.cluster.hub_proxy, "sidecar": r.sidecar.proxy}
    before = {name: p.counts["upstream_failed"] for name, p in proxies.items()}
    await _long_outage(r, NATS_OUTAGE, r.cluster.nats.kill)
    r.over()
    await r.cluster.nats.start()
    made = {name: p.counts["upstream_failed"] - before[name] for name, p in proxies.items()}
    r.say(f"reconnect attempts in the outage: {made}")
    r.injected(min(made.values()) > 0, "the processes tried to reconnect")


async def hub_down_long(r: Round) -> None:
    """The hub down for 30 minutes while the sidecar has events to ship: its
    shipper retries them all along (a timeout is no reason for a hello: only
    the hub's refusals and announcements are), and it never exits."""
    await r.until_accepted(r.rng.uniform(0.2, 0.4))
    # The hub stops hearing events first, so that the sidecar is left with
    # events to ship when the hub dies, and retries them through the outage.
    proxy = r.cluster.hub_proxy
    held = proxy.add_rule("drop", "mailrun.hub.events.*", direction="to_client")
    await r.waiting(lambda: held.hits > 0, what="an events request the hub never hears")
    counting, resent = _counter(r.sidecar.proxy, "mailrun.hub.events.*")
    await _long_outage(r, HUB_OUTAGE, lambda: r.cluster.hub.kill(signal.SIGKILL))
    proxy.remove_rule(held)
    r.sidecar.proxy.remove_rule(counting)
    code = await r.cluster.hub.wait_exit()
    r.expect(code == -signal.SIGKILL, f"the hub exited {code} during the outage")
    r.over()
    await r.start_hub()
    r.notes["pids"] = (r.cluster.hub.pid, r.notes["pids"][1])  # a new hub, the same sidecar
    r.say(f"events requests in the outage: {resent[0]}")
    r.injected(resent[0] > 1, "the sidecar kept resending its events to the missing hub")


LOG_LINES_PER_MINUTE = 240
"""What a long outage may add to the hub's and the sidecar's logs, per minute
of the real outage it stands for: a line per retry attempt of each process
at most (retry delays are at least half the 1 s cap: 120 a minute); a loop
that spins logs thousands a second."""


async def long_outage_verify(r: Round, result: CheckResult) -> None:
    await same_processes(r, result)
    if "outage" in r.notes:
        allowed = LOG_LINES_PER_MINUTE * r.notes["outage"] / 60
        r.expect(
            r.notes["log_lines"] <= allowed,
            f"{r.notes['log_lines']} log lines in the outage (at most {allowed:.0f})",
        )
    # The compression reached the processes (sidecars run a stripped environment).
    for path in (r.cluster.hub.log_path, r.sidecar.proc.log_path):
        r.injected(f"{BACKOFF_MAX_ENV}=" in path.read_text(errors="replace"),
                   f"{path.name}'s process capped its retry delays")  # fmt: skip


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
        Fault("F8", "nats-server SIGKILL and restart", f8_nats_restart, verify=same_processes),
        Fault("F9", "hub SIGKILL every few seconds", f9_hub_kills,
              load=Load(mails=20, think=0.15)),
        Fault("F10", "sidecar cut from NATS, hub connected", f10_sidecar_partition,
              load=Load(think=0.3), verify=same_processes),
        Fault("F11", "hub frozen (SIGSTOP), then resumed", f11_hub_paused,
              load=Load(think=0.15), verify=f11_verify),
        Fault("F12", "sidecar frozen (SIGSTOP), then resumed", f12_sidecar_paused,
              load=Load(think=0.15), verify=f12_verify),
        Fault("F13-lock", "hub.db write-locked beyond the busy timeout", f13_locked_store,
              verify=f13_verify),
        Fault("F13-raise", "accept commits failing", f13_failed_commit,
              hub_failpoints="hub.accept.before_commit=3*raise", verify=f13_verify),
        Fault("F14", "triggers racing the run's completion", f14_completion_race,
              load=Load(mails=20, think=0.15), verify=f14_verify, ignore=("stop",),
              may_reject=("workflow_run_terminal",)),
        Fault("F15", "deployment moved from a frozen owner, which wakes up", f15_moved_under_load,
              start_sidecar=False, load=Load(think=0.1), verify=f15_verify),
        Fault("F16", "corrupted, half-fetched and orphaned blobs", f16_blobs,
              start_sidecar=False, load=Load(clients=3, mails=6, pad=70_000), verify=f16_verify),
        Fault("F17", "hub cut from NATS, sidecars connected", f17_hub_partition,
              load=Load(think=0.3), verify=same_processes),
    )
}  # fmt: skip
"""Every fault, by key. Durations are random here; the matrix fixes F10's at
6 s, F11's at 5 s, F12's at 4 s and F17's at 7 s."""

LONG: dict[str, Fault] = {
    f.key: f
    for f in (
        Fault("F8-long", "nats-server down 20 minutes", nats_down_long, time_scaled=True,
              load=Load(think=0.1, deadline=NATS_OUTAGE + 120), verify=long_outage_verify),
        Fault("F9-long", "the hub down 30 minutes", hub_down_long, time_scaled=True,
              load=Load(think=0.1, deadline=HUB_OUTAGE + 120), verify=long_outage_verify),
    )
}  # fmt: skip
"""Long outages, run on a cluster whose processes cap their retry delays
(``MAILRUN_BACKOFF_MAX``); ``deadline`` covers the real outage (the
workload's clients keep retrying through it at their own, unscaled pace)."""
