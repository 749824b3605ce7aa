"""Long outages in compressed time: nats-server down 20 minutes, the hub down
30, every retry loop capped by ``MAILRUN_BACKOFF_MAX`` so that it makes the
attempts it would make in real time, each sooner."""

from __future__ import annotations

import signal
from collections.abc import Callable

import anyio

from runtime.config import BACKOFF_MAX_ENV

from ..checker import CheckResult
from ..proxy import Frame, NatsFaultProxy, Rule
from ..rounds import Round
from .common import note_processes, same_processes

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
    note_processes(r)
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
