"""One round of a fault test: a fresh deployment, a workload, a fault, a verdict.

:func:`run_round` deploys a recording workflow on a running
:class:`~.cluster.Cluster`, runs a :class:`~.workload.Workload` against it
while the fault's ``inject`` does its damage and repairs it, then waits
until the system has quiesced and checks the history. The matrix
(``test_matrix.py``) runs one round per fault on a cluster of its own; the
soak (``soak.py``) runs many rounds on a few long-lived clusters, which is
why a round brings its own deployment and leaves the hub without failpoints.

The verdict has three parts, kept apart because they mean different things:

- safety (the checker, and the fault's own ``r.expect``): nothing accepted
  was lost, duplicated or reordered;
- liveness: after the fault, every mail settles (its client, retrying with
  the same message id, gets a receipt) within ``Fault.settle_within``
  seconds, and every dispatch accepted by the fault's end is processed
  within as long; a mail still open past the bound stops the workload;
- injection: the fault did what it is about (``r.injected``); a round whose
  fault could not be injected tested nothing, a harness problem the soak
  retries, not a failure of the system.

The clock of both recovery and the liveness bound starts at
:meth:`Round.over`, which ``inject`` calls at the kill when the fault kills
a process (its restart and boot are part of the recovery, as ``mailrun up``
would start it again at once), or when an outage the test imposes ends (NATS
started again, a partition healed, a lock released, a paused process
resumed).
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

from .checker import CheckResult, Liveness
from .cluster import ASLEEP_WITHIN, Cluster, Proc, SidecarNode
from .observe import check_deployment
from .outcome import Outcome, Phases
from .workload import Workload, WorkloadConfig

SETTLE_WITHIN = 15.0
"""Seconds, after a fault's end, for every mail to settle and every accepted
dispatch to be processed. Recovery takes 0.1-3 s (docs/faults.md); the rest
is room for a shared, loaded machine, where a timed bound must not flake."""


TIMER_AFTER = 0.5
"""Seconds after each mail its timer is due: most are pending when a fault
strikes, and each must fire exactly once after it healed."""


class NotInjected(Exception):
    """The fault could not be injected: the round tested nothing."""


RECORDER = """
import hashlib
import os

import anyio

HOLD = {hold!r}
ENTERED = {entered!r}
TIMER_AFTER = {timer_after!r}


async def main(ctx, item):
    if os.path.exists(HOLD):
        # The test holds this call here, to kill the sidecar inside a handler.
        open(ENTERED, "w").close()
        while os.path.exists(HOLD):
            await anyio.sleep(0.005)
    if item.kind == "timer":
        # Each mail's timer, fired: the checker wants each exactly once.
        ctx.state.setdefault("fired", []).append(item.name)
        return
    seen = ctx.state.setdefault("seen", [])
    seen.append({{
        "dispatch_id": item.dispatch_id,
        "subject": item.subject,
        "size": len(item.body),
        "sha256": hashlib.sha256(item.body).hexdigest(),
    }})
    ctx.state["count"] = len(seen)
    # A timer per mail, pending across the fault: it fires once, whatever crashed.
    name = "t-" + item.subject
    ctx.set_timer(name, after=TIMER_AFTER)
    ctx.state.setdefault("set", []).append(name)
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
    settle_within: float = SETTLE_WITHIN
    """The liveness bound, in seconds after the fault's end."""
    may_reject: tuple[str, ...] = ()
    """Rejection reasons this fault makes legitimate (the checker's
    ``Liveness.may_reject``); any other 4xx is a liveness failure."""
    hub_failpoints_after: str = ""
    """Armed on every hub the fault's repair starts. Empty but for one test:
    a hub that refuses every mail after the fault, which the liveness check
    must fail (tests/faults/test_matrix.py)."""
    time_scaled: bool = False
    """Runs on a cluster whose processes cap every retry delay
    (``MAILRUN_BACKOFF_MAX``): a long outage in compressed time."""


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
    not_injected: list[str] = field(default_factory=list)
    paused: list[Proc] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)
    phases: Phases = field(default_factory=Phases)

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

        await self.waiting(enough, timeout=self.load.deadline, what=f"{want} mails accepted")

    async def waiting(self, condition: Any, *, timeout: float = 20.0, what: str) -> Any:
        """:func:`wait_for` a state the fault needs; :class:`NotInjected` if it
        never comes (the checker still judges what the system did meanwhile)."""
        try:
            return await wait_for(condition, timeout=timeout, what=what)
        except AssertionError as exc:
            raise NotInjected(str(exc)) from None

    async def start_sidecar(self, failpoints: str = "") -> SidecarNode:
        return await self.cluster.start_sidecar(self.dep_id, failpoints=failpoints)

    async def kill_sidecar(self) -> int:
        """SIGKILL the deployment's sidecar; its exit code."""
        proc = self.sidecar.proc
        proc.kill(signal.SIGKILL)
        return await proc.wait_exit()

    async def kill_hub(self) -> int:
        """SIGKILL the hub; its exit code."""
        self.cluster.hub.kill(signal.SIGKILL)
        return await self.cluster.hub.wait_exit()

    async def start_hub(self) -> None:
        """Start the hub again after the fault (with ``Fault.hub_failpoints_after``)."""
        await self.cluster.start_hub(failpoints=self.fault.hub_failpoints_after)

    def pause(self, proc: Proc) -> None:
        """SIGSTOP ``proc``: frozen, as by a long GC pause or a stalled VM.
        The round resumes it, whatever happens, when the fault ends."""
        proc.kill(signal.SIGSTOP)
        self.paused.append(proc)

    def resume(self, proc: Proc) -> None:
        proc.kill(signal.SIGCONT)
        self.paused.remove(proc)

    def expect(self, condition: bool, problem: str) -> None:
        """Record ``problem`` unless ``condition`` holds (the round fails with it)."""
        if not condition:
            self.problems.append(f"{self.fault.key}: {problem}")

    def say(self, text: str) -> None:
        """A figure for the round's summary (not a verdict)."""
        self.said.append(text)

    def injected(self, condition: bool, evidence: str) -> None:
        """Record that the fault was not injected unless ``condition``, the
        ``evidence`` that it was, holds (a harness problem: the round tested
        nothing, and the soak retries it)."""
        if not condition:
            self.not_injected.append(f"{self.fault.key}: no evidence that {evidence}")

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
        """The fault is over: recovery and the liveness bound are measured from
        now. Called at the kill when the fault kills a process (before it is
        started again), or when an imposed outage ends (see the module
        docstring); only the first call counts."""
        if self.ended is not None:
            return
        self.ended = time.monotonic()
        [(seq,)] = self.query(
            "SELECT COALESCE(MAX(seq), 0) FROM workflow_run_dispatch WHERE deployment_id = ?",
            self.dep_id,
        )
        self.ended_seq = int(seq)

    async def caught_up(self, timeout: float) -> float | None:
        """Wait until every dispatch accepted when the fault ended is settled;
        the seconds since it ended, or None if that took over ``timeout``
        (a liveness failure, recorded)."""
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

        left = max(0.0, self.ended + timeout - time.monotonic())
        try:
            await wait_for(settled, timeout=left, what="recovery from the fault")
        except AssertionError:
            self.expect(False, f"liveness: not recovered {timeout:g}s after the fault")
            return None
        return time.monotonic() - self.ended

    async def repair(self) -> None:
        """Undo what an ``inject`` that gave up half-way left broken (paused
        processes, network faults, NATS, the hub or the sidecar down), so
        that the system gets its chance to recover and the checker a fair
        verdict. Never called after a complete ``inject``: a process down
        then is a finding, not something to mend."""
        for proc in list(self.paused):
            self.resume(proc)
        self.hold.unlink(missing_ok=True)
        for proxy in (self.cluster.hub_proxy, self.sidecar.proxy):
            proxy.clear()
            proxy.heal()
            await proxy.restore()
        self.over()
        if not self.cluster.nats.running:
            await self.cluster.nats.start()
        if not self.cluster.hub.running:
            await self.start_hub()
        if not self.sidecar.proc.running:
            await self.start_sidecar()


async def arm_hub(cluster: Cluster, failpoints: str, *, fresh: bool = False) -> None:
    """Give the round a hub with ``failpoints`` armed afresh (an orderly restart).

    A running hub without failpoints serves a round without them as it is,
    and so does a ``fresh`` one (started for this round, armed with them).
    Any other is restarted, even one armed the same way: counts (``3*raise``)
    live in the process, and an earlier round may have used them up."""
    if cluster.hub.running and cluster.hub.failpoints == failpoints and (fresh or not failpoints):
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
    phases: Phases | None = None,
    armed: bool = False,
) -> Outcome:
    """One round of ``fault`` against a fresh deployment ``name``; see the
    module docstring. ``phases``: the caller's, to go on timing the round's
    phases in (its own before, the cluster's stop after). ``armed``: the
    cluster's hub was started for this round with ``fault.hub_failpoints``
    (no restart to arm it)."""
    load = load or fault.load
    phases = phases or Phases()
    await anyio.Path(scratch).mkdir(parents=True, exist_ok=True)
    await arm_hub(cluster, fault.hub_failpoints, fresh=armed)
    phases.mark("arm")
    source = RECORDER.format(
        hold=str(scratch / "hold"), entered=str(scratch / "entered"), timer_after=TIMER_AFTER
    )
    dep = await cluster.deploy(name, source)
    phases.mark("deploy")
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
    r = Round(cluster, fault, load, random.Random(seed), scratch, dep, workload, phases=phases)
    await cluster.add_sidecar(r.dep_id)
    if fault.start_sidecar:
        await r.start_sidecar()
        await cluster.wait_connected(r.dep_id)
    phases.mark("sidecar")
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_serve, r)
        try:
            await fault.inject(r)
        except NotInjected as exc:
            r.not_injected.append(f"{fault.key}: {exc}")
            await r.repair()
        finally:
            for proc in list(r.paused):  # never leave a process frozen
                r.resume(proc)
        phases.mark("inject")
        r.over()
        recovery = await r.caught_up(fault.settle_within)
        phases.mark("caught_up")
    phases.mark("workload")
    history = workload.history
    liveness = Liveness(
        healed=(r.ended or started) - history.started,
        bound=fault.settle_within,
        planned=workload.planned(),
        may_reject=fault.may_reject,
    )
    result = await check_deployment(
        cluster,
        history,
        r.dep_id,
        timeout=fault.settle_within,
        ignore=fault.ignore,
        liveness=liveness,
    )
    phases.mark("check")
    if fault.verify is not None:
        await fault.verify(r, result)
        phases.mark("verify")
    r.expect(cluster.hub.running, "the hub is not running at the end")
    if cluster.idle_stop is None:
        r.expect(r.sidecar.proc.running, "the sidecar is not running at the end")
    else:
        # Scale to zero: everything settled, the deployment falls asleep again.
        try:
            await cluster.wait_asleep(r.dep_id, timeout=ASLEEP_WITHIN)
        except AssertionError:
            r.expect(False, f"not asleep again {ASLEEP_WITHIN:g}s after the check")
        phases.mark("asleep")
    duration = time.monotonic() - started
    return Outcome(
        fault.key, r.dep_id, result, recovery, duration, r.problems, r.not_injected, history,
        r.said, phases,
    )  # fmt: skip


async def _serve(r: Round) -> None:
    """Run the workload; stop it once a mail has stayed unsettled for the
    liveness bound after the fault: it has failed liveness already, and
    waiting out the workload's deadline would prove nothing more."""
    history, bound = r.workload.history, r.fault.settle_within
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while True:
                await anyio.sleep(0.1)
                if r.ended is None:
                    continue
                healed, now = r.ended - history.started, history.now()
                if any(now > max(healed, first) + bound for first in history.unsettled().values()):
                    tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await r.workload.run()
        tg.cancel_scope.cancel()
