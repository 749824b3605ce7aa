"""A sidecar's start bound (hub/up/fleet/bound.py ``StartBound``), with the fleet's
stand-in sidecars (real processes, tests/hub/up/test_fleet.py) and a hub
that says, per deployment, whether it welcomed the sidecar: one never
welcomed is killed and started again through its slot, with a growing
bound and a jittered backoff; nothing is restarted while the hub or NATS
is down, however long. Then through real `mailrun up` processes: a
sidecar whose hello the hub holds (a failpoint) is started again past the
bound and, once the hub lets hellos through, processes its mail once; a
NATS outage three bounds long restarts no sidecar.
"""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

import hub.up
from hub.cli import main
from hub.up import Fleet, UpSettings
from hub.up.fleet import StartBound
from tests.e2e.harness import Up, mailrun_up, recorder_source, send_accepted
from tests.hub.up.test_fleet import Stand, running, sampling
from tests.hub.up.test_forking import gone, up_log
from tests.support import wait_for
from tests.support.launch.starts import SIDECAR_START_TIMEOUT

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND = 0.5
OUTAGE = 6  # bounds


class Hub:
    """Whether each deployment's sidecar is welcomed; down: no answer at all."""

    def __init__(self, welcomed: set[str]) -> None:
        self.welcomed = welcomed
        self.up = True
        self.nats = True
        self.looks = 0

    async def look(self, dep: str) -> bool | None:
        self.looks += 1
        return (dep in self.welcomed) if self.up else None

    async def nats_up(self) -> bool:
        return self.nats

    async def polls(self, bound: StartBound) -> None:
        """What up's listing poll tells the bound, every 50 ms."""
        while True:
            bound.answered(self.up)
            await anyio.sleep(0.05)


async def test_a_start_never_welcomed_is_restarted_after_its_bound_within_max_awake(
    tmp_path: Path,
) -> None:
    stand = Stand(tmp_path)
    fleet = Fleet(stand.make, sleeps=True, max_awake=1, say=lambda line: None)
    hub = Hub(welcomed={"dep_b"})
    said: list[str] = []
    bound = StartBound(
        fleet, bound=BOUND, look=hub.look, nats_up=hub.nats_up, say=said.append, tick=0.05
    )
    most = [0]
    async with running(fleet) as tg:
        tg.start_soon(hub.polls, bound)
        tg.start_soon(bound.run)
        stand.boot = 600  # SIGUSR1 kills it, as it does a sidecar not yet joined
        assert fleet.wake("dep_a")
        stand.boot = 0
        assert fleet.wake("dep_b")
        assert list(fleet.waiting) == ["dep_b"]
        # dep_a misses its bound: killed, its slot goes to dep_b (welcomed,
        # then nudged asleep as dep_a waits), and dep_a starts again.
        await sampling(fleet, most, lambda: stand.starts("dep_a") >= 3)
        child = fleet.children.get("dep_a") or fleet.resting["dep_a"]
        assert child.misses >= 2
        # Each miss in a row doubles the next start's bound, up to four times.
        assert bound.bound_of(child) == BOUND * min(2**child.misses, 4)
        hub.welcomed.add("dep_a")
        misses = bound.missed
        await wait_for(lambda: child.misses == 0, what="dep_a seen welcomed")
        assert bound.missed == misses
        assert said == [
            f"mailrun up: sidecar-dep_a welcomed after {misses} start(s) that missed the bound"
        ]
    assert stand.starts("dep_b") >= 1
    assert bound.missed >= 2
    assert most[0] == 1 and fleet.most_awake == 1


async def test_no_start_is_restarted_while_the_hub_or_nats_is_down(tmp_path: Path) -> None:
    stand = Stand(tmp_path, boot=600)
    fleet = Fleet(stand.make, sleeps=False, max_awake=None, say=lambda line: None)
    hub = Hub(welcomed=set())
    said: list[str] = []
    bound = StartBound(
        fleet, bound=BOUND, look=hub.look, nats_up=hub.nats_up, say=said.append, tick=0.05
    )
    async with running(fleet) as tg:
        hub.up = False
        tg.start_soon(hub.polls, bound)
        tg.start_soon(bound.run)
        assert fleet.wake("dep_a")
        await wait_for(lambda: stand.starts("dep_a") == 1, what="dep_a started")
        # Six bounds of a hub outage, then six of a NATS outage: not one
        # restart. A wrongful one would show within about three (the look
        # past the bound, the kill, MISSED_START's first delay of 0.5-1 s).
        with anyio.move_on_after(OUTAGE * BOUND):
            await wait_for(lambda: stand.starts("dep_a") > 1, timeout=60, what="a restart")
        assert hub.looks == 0
        hub.up, hub.nats = True, False
        with anyio.move_on_after(OUTAGE * BOUND):
            await wait_for(lambda: stand.starts("dep_a") > 1, timeout=60, what="a restart")
        assert stand.starts("dep_a") == 1 and bound.missed == 0
        # NATS asked once a bound at most, after a look: no spin.
        assert 1 <= hub.looks <= OUTAGE
        hub.nats = True
        await wait_for(lambda: stand.starts("dep_a") == 2, what="the restart once both are up")
    assert bound.missed == 1


@pytest.mark.parametrize(
    ("args", "env", "bound"),
    [
        ([], {}, 60.0),
        (["--sidecar-join-timeout", "12.5"], {}, 12.5),
        ([], {"MAILRUN_SIDECAR_JOIN_TIMEOUT": "0"}, 0.0),
    ],
)
def test_up_hands_its_start_bound_to_the_supervisor(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    bound: float,
) -> None:
    seen: list[UpSettings] = []

    async def run_up(settings: UpSettings, *, task_status: object) -> None:
        seen.append(settings)  # and returns before it ever started

    monkeypatch.setattr(hub.up, "run_up", run_up)
    result = CliRunner().invoke(main, ["up", "--state-dir", str(tmp_path), *args], env=env)
    assert seen, result.output
    assert seen[0].sidecar_join_timeout == bound
    refused = CliRunner().invoke(main, ["up", "--sidecar-join-timeout", "-1"])
    assert refused.exit_code == 2, refused.output


# --- through a real `mailrun up` -----------------------------------------------------------

JOIN = 5.0  # up's bound in these tests: a start whose hello the hub holds misses it
HELD_JOIN = 2.5
"""The bound where every hello is held at first: the first start misses it
for sure, and the second (twice the bound after a miss) is looked at, and
seen welcomed, 5 s after its spawn, not LOOK_AFTER's 10."""


def sidecars_seen(up: Up, dep_id: str, seen: set[int]) -> set[int]:
    """The pids of ``dep_id``'s sidecars seen so far, with the one running now."""
    found = up.find("sidecar", dep_id)
    if found is not None:
        seen.add(found.pid)
    return seen


async def test_a_sidecar_the_hub_does_not_welcome_is_started_again_and_joins_once_let(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "hello-gate"
    # The hub holds every hello, verified, before its claim: no sidecar joins.
    env = {"MAILRUN_FAILPOINTS": f"hub.hello.before_claim=pause({gate})"}
    async with mailrun_up(tmp_path, "--sidecar-join-timeout", str(HELD_JOIN), env=env) as up:
        dep = await up.deploy("held", recorder_source())
        first = await up.sidecar_pid(dep["id"])
        receipt = await send_accepted(up, dep["address"], "one")
        await wait_for(lambda: Path(f"{gate}.reached").exists(), what="a hello held")

        def restarted() -> bool:
            found = up.find("sidecar", dep["id"])
            return found is not None and found.pid != first

        # Its bound, its stop (SIGTERM, 5 s of grace at most) and a restart delay.
        await wait_for(restarted, timeout=SIDECAR_START_TIMEOUT, what="a sidecar started again")
        log = up_log(up)
        assert f"sidecar-{dep['id']} was not welcomed by the hub within {HELD_JOIN:g} s" in log
        assert "such restarts by this up); restarting in" in log
        assert not gone(up.proc.pid)

        gate.touch()  # the cause is gone
        run = await up.wait_state(receipt["run_id"], lambda r: r["state"].get("count") == 1)
        # up looks at the start once its bound (2 x HELD_JOIN) is over, and
        # sees it welcomed.
        await wait_for(
            lambda: f"sidecar-{dep['id']} welcomed after" in up_log(up),
            timeout=SIDECAR_START_TIMEOUT,
            what="up to see it welcomed",
        )
        await send_accepted(up, dep["address"], "two")
        run = await up.wait_state(receipt["run_id"], lambda r: r["state"].get("count") == 2)
        seen = run["state"]["seen"]
        assert [s["subject"] for s in seen] == ["one", "two"]
        assert len({s["dispatch_id"] for s in seen}) == 2
        statuses = up.query(
            "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ?", dep["id"]
        )
        assert sorted(statuses) == [("processed",), ("processed",)]


async def test_a_nats_outage_longer_than_the_bound_restarts_no_sidecar(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path, "--sidecar-join-timeout", str(JOIN)) as up:
        dep = await up.deploy("patient", recorder_source())
        receipt = await send_accepted(up, dep["address"], "one")
        await up.wait_state(receipt["run_id"], lambda r: r["state"].get("count") == 1)
        (nats,) = [p for p in up.children() if p.name() == "nats-server"]
        first = await up.sidecar_pid(dep["id"])
        pids: set[int] = set()
        nats.suspend()  # it greets no one: no sidecar can join
        try:
            os.kill(first, signal.SIGKILL)  # its next start cannot join
            await wait_for(
                lambda: len(sidecars_seen(up, dep["id"], pids) - {first}) == 1,
                timeout=SIDECAR_START_TIMEOUT,
                what="the sidecar started again",
            )
            # Three bounds of the outage: the start is looked at once its
            # bound is over and again a bound after that, NATS does not
            # greet either time, and nothing is restarted.
            with anyio.move_on_after(3 * JOIN):
                await wait_for(
                    lambda: len(sidecars_seen(up, dep["id"], pids) - {first}) > 1,
                    timeout=math.inf,
                    what="another start",
                )
        finally:
            nats.resume()
        assert len(pids - {first}) == 1
        assert "was not welcomed" not in up_log(up)
        await send_accepted(up, dep["address"], "two")
        run = await up.wait_state(receipt["run_id"], lambda r: r["state"].get("count") == 2)
        assert [s["subject"] for s in run["state"]["seen"]] == ["one", "two"]
        assert len(sidecars_seen(up, dep["id"], pids) - {first}) == 1
