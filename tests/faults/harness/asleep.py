"""The asleep faults: a deployment that scales to zero between its mails (a
sidecar with ``--idle-stop``, woken by the cluster as ``mailrun up`` wakes
it) meets a fault while it wakes up.

The workload leaves each mail's handling, its timer and the idle time
behind before the next mail, so that every mail is a wake-up:

- A1: the hub SIGKILLed as the woken sidecar starts;
- A2: the woken sidecar SIGKILLed inside its first item;
- A3: nats-server down while the deployment is woken.

The checker judges them as any other round: every mail processed exactly
once, every timer fired once; and the deployment falls asleep again.
"""

from __future__ import annotations

import signal

import anyio

from .rounds import Fault, Load, Round

IDLE_STOP = 0.5
"""The sidecars' ``--idle-stop`` in the fault tests (the matrix's too): half
a second, so that a round's last wait (its deployment asleep again) and the
A cases' wake-ups take no longer than that costs (1 s before: 0.5 s more a
round, 1.5 s more an A case)."""

# One client, a mail every 2 s: handled, its timer fired (0.5 s), the idle
# half second and the Sleep exchange are over before the next mail comes
# (a mail that finds it awake all the same wakes nothing: the next one does,
# and the A cases wait for a wake).
WAKING = Load(clients=1, mails=4, think=2.0)


async def _asleep_then_woken(r: Round) -> None:
    """Wait until the deployment sleeps, then until its sidecar is woken."""
    proc = r.sidecar.proc

    async def asleep() -> bool:
        return not proc.running and proc.asleep

    async def woken() -> bool:
        return proc.running

    await r.waiting(asleep, what="the deployment asleep")
    woken_before = r.cluster.woken
    await r.waiting(woken, what="its sidecar woken by a mail")
    r.injected(r.cluster.woken > woken_before, "the sidecar was woken by the hub's wake list")


async def a1_hub_killed_waking(r: Round) -> None:
    await _asleep_then_woken(r)
    r.expect(await r.kill_hub() == -signal.SIGKILL, "the hub did not die of SIGKILL")
    r.over()
    await r.start_hub()


async def a2_sidecar_killed_in_its_first_item(r: Round) -> None:
    proc = r.sidecar.proc

    async def asleep() -> bool:
        return not proc.running and proc.asleep

    await r.waiting(asleep, what="the deployment asleep")
    r.hold.touch()  # the woken sidecar's first handler call stops there

    async def entered() -> bool:
        return r.entered.exists()

    await r.waiting(entered, timeout=30, what="the woken sidecar inside its first item")
    r.injected(r.cluster.woken > 0, "the sidecar was woken by the hub's wake list")
    r.expect(await r.kill_sidecar() == -signal.SIGKILL, "the sidecar did not die of SIGKILL")
    r.over()
    r.hold.unlink()
    r.entered.unlink()
    await r.start_sidecar()  # a crash: restarted at once, as mailrun up does


async def a3_nats_down_during_the_wake(r: Round) -> None:
    proc = r.sidecar.proc

    async def asleep() -> bool:
        return not proc.running and proc.asleep

    await r.waiting(asleep, what="the deployment asleep")
    r.cluster.nats.kill()

    async def woken() -> bool:
        return proc.running

    # The hub takes the next mail over HTTP and names the deployment: its
    # sidecar starts with no NATS to reach.
    await r.waiting(woken, what="its sidecar woken while NATS is down")
    r.injected(not r.cluster.nats.running, "NATS was down as the sidecar woke")
    await anyio.sleep(r.rng.uniform(0.5, 1.5))  # the outage goes on
    r.over()
    await r.cluster.nats.start()


ASLEEP: dict[str, Fault] = {
    f.key: f
    for f in (
        Fault("A1", "hub SIGKILL as an asleep deployment wakes", a1_hub_killed_waking,
              load=WAKING),
        Fault("A2", "the woken sidecar SIGKILLed in its first item",
              a2_sidecar_killed_in_its_first_item, load=WAKING),
        Fault("A3", "nats-server down while an asleep deployment wakes",
              a3_nats_down_during_the_wake, load=WAKING),
    )
}  # fmt: skip
"""The asleep faults, by key (run by the matrix on a cluster with ``IDLE_STOP``)."""
