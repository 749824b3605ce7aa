"""One round of a fault test: a fresh deployment, a workload, a fault, a verdict.

:func:`run_round` deploys a recording workflow on a running
:class:`~.cluster.Cluster`, runs a :class:`~.workload.Workload` against it
while the fault's ``inject`` does its damage and repairs it, then waits
until the system has quiesced and checks the history. The matrix
(``test_matrix.py``) runs one round per fault on a cluster of its own; the
soak (``soak.py``) runs many rounds on a few long-lived clusters, which is
why a round brings its own deployment and leaves the hub without failpoints.

Recovery time is measured from the moment ``inject`` declares the fault over
(:meth:`Round.over`: the process is back, the partition healed) until every
dispatch the hub had accepted by then is processed.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tests.support import wait_for

from .checker import CheckResult
from .cluster import Cluster, SidecarNode
from .observe import check_deployment
from .workload import History, Workload, WorkloadConfig

RECORDER = """
import hashlib
import os

import anyio

HOLD = {hold!r}
ENTERED = {entered!r}


async def main(ctx, item):
    if os.path.exists(HOLD):
        # The test holds this call here, to kill the sidecar inside a handler.
        open(ENTERED, "w").close()
        while os.path.exists(HOLD):
            await anyio.sleep(0.005)
    seen = ctx.state.setdefault("seen", [])
    seen.append({{
        "dispatch_id": item.dispatch_id,
        "subject": item.subject,
        "size": len(item.body),
        "sha256": hashlib.sha256(item.body).hexdigest(),
    }})
    ctx.state["count"] = len(seen)
    if item.subject == "stop":
        ctx.complete({{"count": len(seen)}})
"""

_OPEN = ("reserved", "delivered")


@dataclass(frozen=True)
class Load:
    """The workload of a round."""

    clients: int = 4
    mails: int = 15
    think: float = 0.05
    pad: int = 0
    attempt_timeout: float = 5.0
    deadline: float = 60.0

    @property
    def total(self) -> int:
        return self.clients * self.mails


Inject = Callable[["Round"], Awaitable[None]]
Verify = Callable[["Round", CheckResult], Awaitable[None]]


@dataclass(frozen=True)
class Fault:
    """One kind of fault: how to inject it, and what else must hold after it."""

    key: str
    title: str
    inject: Inject
    hub_failpoints: str = ""
    """Armed on the hub before the workload starts (by an orderly restart if needed)."""
    start_sidecar: bool = True
    """False: ``inject`` starts the deployment's sidecar itself, when it chooses."""
    load: Load = field(default_factory=Load)
    verify: Verify | None = None
    ignore: tuple[str, ...] = ()
    """Subjects of mails ``inject`` sends outside the workload."""


@dataclass(eq=False)
class Round:
    """What ``inject`` and ``verify`` work with."""

    cluster: Cluster
    fault: Fault
    load: Load
    rng: random.Random
    scratch: Path
    dep: dict[str, Any]
    workload: Workload
    ended: float | None = None
    ended_seq: int = 0
    problems: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def dep_id(self) -> str:
        return str(self.dep["id"])

    @property
    def hold(self) -> Path:
        """While this file exists, every handler call stops inside the handler."""
        return self.scratch / "hold"

    @property
    def entered(self) -> Path:
        """Created by a handler call that stopped at :attr:`hold`."""
        return self.scratch / "entered"

    @property
    def sidecar(self) -> SidecarNode:
        return self.cluster.sidecars[self.dep_id]

    def accepted(self) -> int:
        return len(self.workload.history.accepted())

    async def until_accepted(self, fraction: float) -> None:
        """Wait until this fraction of the workload's mails is accepted."""
        want = max(1, min(self.load.total, round(self.load.total * fraction)))

        async def enough() -> bool:
            return self.accepted() >= want

        await wait_for(enough, timeout=self.load.deadline, what=f"{want} mails accepted")

    async def start_sidecar(self, failpoints: str = "") -> SidecarNode:
        return await self.cluster.start_sidecar(self.dep_id, failpoints=failpoints)

    async def kill_sidecar(self) -> int:
        """SIGKILL the deployment's sidecar; its exit code."""
        proc = self.sidecar.proc
        proc.kill(signal.SIGKILL)
        return await proc.wait_exit()

    def expect(self, condition: bool, problem: str) -> None:
        """Record ``problem`` unless ``condition`` holds (the round fails with it)."""
        if not condition:
            self.problems.append(f"{self.fault.key}: {problem}")

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return self.cluster.query(sql, *args)

    def sidecar_query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """Read the sidecar's inbox.db (read-only, beside the running sidecar)."""
        path = self.cluster.sidecar_root / self.dep_id / "workflow-runs" / self.dep_id / "inbox.db"
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def over(self) -> None:
        """The fault is over: recovery is measured from now."""
        self.ended = time.monotonic()
        [(seq,)] = self.query(
            "SELECT COALESCE(MAX(seq), 0) FROM workflow_run_dispatch WHERE deployment_id = ?",
            self.dep_id,
        )
        self.ended_seq = int(seq)

    async def caught_up(self, timeout: float) -> float:
        """Wait until every dispatch accepted when the fault ended is settled;
        the seconds since it ended."""
        assert self.ended is not None

        async def settled() -> bool:
            [(n,)] = self.query(
                "SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ?"
                " AND seq <= ? AND status IN (?, ?)",
                self.dep_id,
                self.ended_seq,
                *_OPEN,
            )
            return bool(n == 0)

        await wait_for(settled, timeout=timeout, what="recovery from the fault")
        return time.monotonic() - self.ended


@dataclass
class Outcome:
    fault: str
    deployment_id: str
    result: CheckResult
    recovery: float
    duration: float
    problems: list[str]
    history: History

    @property
    def ok(self) -> bool:
        return self.result.ok and not self.problems

    def summary(self) -> str:
        text = f"{self.fault} {self.result.summary()} recovery={self.recovery:.2f}s"
        return "; ".join([text, *self.problems])


async def arm_hub(cluster: Cluster, failpoints: str) -> None:
    """Make the running hub's failpoints ``failpoints`` (an orderly restart if they differ)."""
    if cluster.hub.running and cluster.hub.failpoints == failpoints:
        return
    await cluster.hub.stop()
    await cluster.start_hub(failpoints=failpoints)


async def run_round(
    cluster: Cluster,
    fault: Fault,
    *,
    seed: int,
    scratch: Path,
    name: str,
    load: Load | None = None,
    recovery_timeout: float = 60.0,
) -> Outcome:
    """One round of ``fault`` against a fresh deployment ``name``; see the module docstring."""
    load = load or fault.load
    await anyio.Path(scratch).mkdir(parents=True, exist_ok=True)
    await arm_hub(cluster, fault.hub_failpoints)
    source = RECORDER.format(hold=str(scratch / "hold"), entered=str(scratch / "entered"))
    dep = await cluster.deploy(name, source)
    config = WorkloadConfig(
        clients=load.clients,
        mails_per_client=load.mails,
        think=load.think,
        pad=load.pad,
        attempt_timeout=load.attempt_timeout,
        deadline=load.deadline,
        seed=seed,
    )
    workload = Workload(cluster.url, dep["address"], config, token=cluster.token)
    r = Round(cluster, fault, load, random.Random(seed), scratch, dep, workload)
    await cluster.add_sidecar(r.dep_id)
    if fault.start_sidecar:
        await r.start_sidecar()
        await cluster.wait_connected(r.dep_id)
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(workload.run)
        await fault.inject(r)
        if r.ended is None:
            r.over()
        recovery = await r.caught_up(recovery_timeout)
    result = await check_deployment(
        cluster, workload.history, r.dep_id, timeout=recovery_timeout, ignore=fault.ignore
    )
    if fault.verify is not None:
        await fault.verify(r, result)
    r.expect(cluster.hub.running, "the hub is not running at the end")
    r.expect(r.sidecar.proc.running, "the sidecar is not running at the end")
    duration = time.monotonic() - started
    return Outcome(fault.key, r.dep_id, result, recovery, duration, r.problems, workload.history)
