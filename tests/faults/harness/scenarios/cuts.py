"""Faults that cut or freeze a process without killing it: the hub or a
sidecar cut from NATS (F17, F10), a process frozen and resumed (F11, F12),
the deployment moved from a frozen owner, which then wakes up (F15)."""

from __future__ import annotations

import shutil

import anyio

from runtime import SidecarExit

from ..checker import CheckResult
from ..cluster import Proc
from ..rounds import Round
from .common import exited, note_processes, processed, same_processes

# --- F17: the hub cut from NATS while the sidecars stay connected ----------------------


async def f17_hub_partition(r: Round, seconds: float | None = None) -> None:
    note_processes(r)
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
    note_processes(r)
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
    note_processes(r)
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
    before = processed(r)

    async def progressing() -> bool:
        return processed(r) > before

    await r.waiting(progressing, what="the new owner processing")
    # The old owner wakes up mid-handler, with deliveries and a Fenced notice
    # waiting in its socket: it must apply nothing and stop.
    r.resume(owner)
    code = await exited(old, "the old owner, fenced,", timeout=30)
    r.expect(code == SidecarExit.OWNER_CONFLICT, f"the old owner exited {code}, not fenced")
    r.notes["moved"] = True


async def f15_verify(r: Round, result: CheckResult) -> None:
    [(epoch,)] = r.query("SELECT owner_epoch FROM deployment WHERE id = ?", r.dep_id)
    r.injected(bool(r.notes.get("moved")) and epoch > 0, "ownership moved (a new epoch)")
