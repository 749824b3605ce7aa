"""Recovery after a hub restart (docs/design.md section 7.5): every live sidecar back
and its pending dispatches re-delivered within 2 s, with no operator action.

One sample, with work in flight everywhere when the hub dies: through the
hub's fault proxy, the hub first stops hearing events (each sidecar has
processed a few mails and holds an events request the hub never answers),
then its deliveries vanish (a few more mails per deployment stay
``reserved``); the hub is SIGKILLed and started again at once (as ``up``
does), on nats-server directly: the proxy only stages the scenario, and a
Python process in every message's path is not part of the system measured
(a sample whose hub is not behind the proxy restarts it there first,
unmeasured). Every clock starts at the kill. ``back``: until the new hub's
``/healthz`` first answers (process start, imports, migrations);
``sessions``: until its ``/healthz`` lists a session for every deployment;
``delivered``: until every reserved dispatch is delivered (the guarantee is
the larger of the two); ``processed``: until the hub records every dispatch
of the sample processed (the lost events resent and ingested).

Used by ``bench/hubs/hub_restart.py`` (the distribution) and
``test_hub_restart_recovery.py`` (one restart, in CI).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tests.support import wait_for

from .cluster import Cluster

GUARANTEE = 2.0
"""Seconds (docs/design.md section 7.5)."""

COUNTER = """
async def main(ctx, item):
    ctx.state["count"] = ctx.state.get("count", 0) + 1
"""

_POLL = 0.02
"""How often the clocks look: each look reads the hub's /healthz (a session
list) and its database, so looking much more often loads the hub measured.
A figure is late by at most this."""


@dataclass(frozen=True)
class Sample:
    back: float
    """Seconds from the kill to the new hub's first /healthz answer."""
    sessions: float
    """Seconds from the kill to a session for every deployment."""
    delivered: float
    """... to every pending dispatch delivered (or already processed)."""
    processed: float
    """... to every dispatch of the sample processed, as the hub records it
    (the events that died with the old hub resent and ingested)."""
    pending: int

    @property
    def recovery(self) -> float:
        """What docs/design.md section 7.5 bounds: sidecars back, pending dispatches sent again."""
        return max(self.sessions, self.delivered)


async def deploy_many(cluster: Cluster, count: int, prefix: str = "r") -> list[str]:
    """``count`` deployments, each with its sidecar running and connected."""
    ids = [str((await cluster.deploy(f"{prefix}{i}", COUNTER))["id"]) for i in range(count)]
    for dep in ids:
        await cluster.start_sidecar(dep)
    for dep in ids:
        await cluster.wait_connected(dep, timeout=30)
    return ids


async def _sessions(cluster: Cluster, boot_id: str) -> set[str]:
    health = await cluster.healthz() or {}
    if health.get("boot_id") != boot_id:
        return set()
    return {s["deployment_id"] for s in health.get("sessions", [])}


async def _send_each(cluster: Cluster, deployments: Sequence[str], count: int) -> list[str]:
    dispatches: list[str] = []
    for dep in deployments:
        address = str((await cluster.http.get(f"/workflows/deployments/{dep}")).json()["address"])
        for _ in range(count):
            r = await cluster.send(address, "pending")
            assert r.status_code == 202, r.text
            dispatches.append(r.json()["dispatch_id"])
    return dispatches


def _count(cluster: Cluster, dispatches: Sequence[str], statuses: Sequence[str]) -> int:
    ids, states = ",".join("?" * len(dispatches)), ",".join("?" * len(statuses))
    [(n,)] = cluster.query(
        f"SELECT COUNT(*) FROM workflow_run_dispatch WHERE id IN ({ids}) AND status IN ({states})",
        *dispatches,
        *statuses,
    )
    return int(n)


async def restart_sample(
    cluster: Cluster, deployments: Sequence[str], *, per_deployment: int = 3
) -> Sample:
    """Measure one hub restart; see the module docstring."""
    if not cluster.hub_behind_proxy:
        await cluster.restart_hub()
        for dep in deployments:
            await cluster.wait_connected(dep, timeout=30)
    proxy = cluster.hub_proxy
    # The hub stops hearing events: each sidecar processes its first mails and
    # is left with an events request in flight to a hub about to die.
    events = proxy.add_rule("drop", "mailrun.hub.events.*", direction="to_client")
    processing = await _send_each(cluster, deployments, per_deployment)
    await wait_for(
        lambda: _count(cluster, processing, ["delivered"]) == len(processing),
        timeout=30,
        interval=_POLL,
        what="the first mails delivered",
    )
    # ... and its deliveries vanish: the next mails stay reserved.
    deliveries = proxy.add_rule("drop", "mailrun.mail.inbound.>", direction="to_server")
    pending = await _send_each(cluster, deployments, per_deployment)
    old = await cluster.healthz()
    assert old is not None
    start = time.monotonic()
    cluster.hub.kill()
    await cluster.hub.wait_exit()
    proxy.remove_rule(events)
    proxy.remove_rule(deliveries)
    await cluster.start_hub(direct=True, wait=False)
    health = await cluster.wait_booted(old["boot_id"], interval=_POLL)
    back = time.monotonic() - start
    everything, boot_id = processing + pending, health["boot_id"]
    took: dict[str, float] = {}  # each measure, from the first poll it held in

    async def recovered() -> bool:
        if "delivered" not in took and _count(cluster, pending, ["reserved"]) == 0:
            took["delivered"] = time.monotonic() - start
        done = len(everything)
        if "processed" not in took and _count(cluster, everything, ["processed"]) == done:
            took["processed"] = time.monotonic() - start
        if "sessions" not in took and set(deployments) <= await _sessions(cluster, boot_id):
            took["sessions"] = time.monotonic() - start
        return len(took) == 3

    await wait_for(recovered, timeout=30, interval=_POLL, what="the sidecars and their dispatches")
    return Sample(back, took["sessions"], took["delivered"], took["processed"], len(pending))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
