"""Faults that kill a process around its commits: the hub crashing before
publish or the receipt (F1, F2), the sidecar dying after its inbox commit,
mid-handler or while writing its record (F4, F6, F7), nats-server and the
hub killed (F8, F9)."""

from __future__ import annotations

import signal

import anyio

from runtime import read_restore_record, record_path

from ..checker import CheckResult
from ..rounds import Round
from .common import crashed, exited, note_processes, processed

# --- F1, F2: the hub crashes around its commits --------------------------------------


async def f1_publish_crash(r: Round) -> None:
    # The hub is armed to crash at its first publish: reserved dispatches pile
    # up until the sidecar says hello, then the hub dies sending the first.
    await r.until_accepted(r.rng.uniform(0.15, 0.4))
    await r.start_sidecar()
    code = await exited(r.cluster.hub, "the hub armed to crash at its first publish")
    r.over()
    crashed(r, "the hub", code)
    [(reserved,)] = r.query(
        "SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ? AND status = ?",
        r.dep_id,
        "reserved",
    )
    r.injected(reserved > 0, "dispatches were left reserved by the crash")
    await r.start_hub()


async def f2_receipt_crash(r: Round) -> None:
    # Armed to crash after the first accepting commit, before any receipt.
    code = await exited(r.cluster.hub, "the hub armed to crash after its first accept")
    crashed(r, "the hub", code)
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


# --- F4, F6, F7: the sidecar dies -----------------------------------------------------


async def f4_inbox_crash(r: Round) -> None:
    # Started late with a backlog: its first batch is stored, never acknowledged.
    await r.until_accepted(r.rng.uniform(0.2, 0.5))
    node = await r.start_sidecar("sidecar.inbox.after_commit=1*crash")
    code = await exited(node.proc, "the sidecar armed to crash after its inbox commit")
    r.over()
    crashed(r, "the sidecar", code)
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
    before = processed(r)

    async def progressing() -> bool:
        return processed(r) > before

    await r.waiting(progressing, what="the restarted sidecar processing")
    await r.kill_sidecar()
    r.over()
    await r.start_sidecar()


async def f7_torn_record(r: Round) -> None:
    await r.until_accepted(r.rng.uniform(0.1, 0.4))
    record = record_path(r.cluster.sidecar_root / r.dep_id, r.dep_id)
    before = record.read_bytes()
    node = await r.start_sidecar("sidecar.record.before_rename=1*crash")
    code = await exited(node.proc, "the sidecar armed to crash before its record's rename")
    r.over()
    crashed(r, "the sidecar", code)
    r.expect(record.read_bytes() == before, "the record changed, though never renamed")
    temps = list(record.parent.glob(".deployment.json.*.tmp"))
    r.expect(len(temps) == 1, f"{len(temps)} temp records beside the record")
    for temp in temps:
        read_restore_record(temp)  # whole: written and fsynced before the crash
    await r.start_sidecar()


# --- F8, F9: nats-server and the hub are killed ---------------------------------------


async def f8_nats_restart(r: Round) -> None:
    note_processes(r)
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
