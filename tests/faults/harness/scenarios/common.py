"""What the faults share: a process's exit awaited and judged, the mails
processed so far, and the check that the same processes rode a fault out."""

from __future__ import annotations

from runtime import SidecarExit
from runtime.testing import CRASH_EXIT_CODE

from ..checker import CheckResult
from ..cluster import Proc
from ..rounds import NotInjected, Round


def crashed(r: Round, what: str, code: int) -> None:
    r.expect(code == CRASH_EXIT_CODE, f"{what} exited {code}, not by its failpoint")


async def exited(proc: Proc, what: str, timeout: float = 30.0) -> int:
    """The exit code of a process the fault makes exit; NotInjected if it does not."""
    try:
        return await proc.wait_exit(timeout=timeout)
    except TimeoutError:
        raise NotInjected(f"{what} did not exit within {timeout:g}s") from None


def processed(r: Round) -> int:
    [(n,)] = r.query(
        "SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ? AND status = ?",
        r.dep_id,
        "processed",
    )
    return int(n)


def note_processes(r: Round) -> None:
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
