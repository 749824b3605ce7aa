"""`mailrun up`'s fleet of sidecars (hub/up/fleet/fleet.py) and its wake loop
(hub/up/fleet/wakes.py), with tiny Python children standing in for sidecars.

A stand-in behaves as a sidecar does towards its supervisor: it catches
SIGUSR1 ("sleep now if you are idle") and then exits ``SidecarExit.ASLEEP``
after writing its pid to its final note; it counts its starts in a file.
"""

from __future__ import annotations

import itertools
import signal
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from click.testing import CliRunner

import hub.up
from hub._errors import HubUnreachable
from hub.cli import main
from hub.up import Backoff, Child, ChildSpec, Fleet, UpSettings
from hub.up.fleet import wake_loop
from hub.up.processes import Handle
from runtime import SidecarExit, new_id
from tests.support import wait_for

# slow: the children are real processes
pytestmark = pytest.mark.slow

SLEEPER = """
    import os, pathlib, signal, sys, time
    home = pathlib.Path(sys.argv[1])
    starts, counting = home / "starts", home / "starts.new"
    counting.write_text(str(int(starts.read_text()) + 1 if starts.exists() else 1))
    counting.replace(starts)  # whole, for the test reading it meanwhile
    time.sleep(float(sys.argv[2]))  # booting: SIGUSR1 has its default action meanwhile

    def asleep(signum, frame):
        (home / "final-exit.pid").write_text(str(os.getpid()))
        os._exit(5)

    signal.signal(signal.SIGUSR1, asleep)
    (home / "ready").write_text("")
    while True:
        time.sleep(1)
"""


CRASHER = """
    import pathlib, sys
    home = pathlib.Path(sys.argv[1])
    starts, counting = home / "starts", home / "starts.new"
    counting.write_text(str(int(starts.read_text()) + 1 if starts.exists() else 1))
    counting.replace(starts)  # whole, for the test reading it meanwhile
    sys.exit(1)
"""


class Stand:
    """Stand-in sidecars under ``root``, one home per deployment."""

    def __init__(self, root: Path, boot: float = 0.0) -> None:
        self.root = root
        self.boot = boot
        self.made: list[str] = []
        self.unknown: set[str] = set()  # no restore record here
        self.crashing: set[str] = set()  # exit 1 at once, every start
        self.asked: list[str] = []  # every make, made or not

    def make(self, dep: str) -> Child | None:
        self.asked.append(dep)
        if dep in self.unknown:
            return None
        home = self.root / dep
        home.mkdir(exist_ok=True)
        self.made.append(dep)
        code = CRASHER if dep in self.crashing else SLEEPER
        argv = [sys.executable, "-c", textwrap.dedent(code), str(home), str(self.boot)]
        spec = ChildSpec(
            f"sidecar-{dep}",
            argv,
            log_path=home / "log",
            final_codes=frozenset({SidecarExit.ASLEEP}),
            final_note=home / "final-exit.pid",
        )
        return Child(spec, backoff=Backoff(initial=0.05, maximum=0.1), stop_grace=1.0)

    def starts(self, dep: str) -> int:
        path = self.root / dep / "starts"
        return int(path.read_text()) if path.exists() else 0


@asynccontextmanager
async def running(fleet: Fleet) -> AsyncIterator[anyio.abc.TaskGroup]:
    """``fleet`` runs inside; its sidecars are stopped on the way out, whatever happened."""
    async with anyio.create_task_group() as tg:
        await tg.start(fleet.run)
        try:
            yield tg
        finally:
            with anyio.CancelScope(shield=True), anyio.fail_after(20):
                await fleet.stop_all()
            tg.cancel_scope.cancel()


async def sampling(fleet: Fleet, most: list[int], until: Callable[[], bool]) -> None:
    """Record the most sidecar processes alive at once until ``until()``."""
    with anyio.fail_after(30):
        while not until():
            most[0] = max(most[0], fleet.running)
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_starts_beyond_max_awake_wait_in_order_while_the_awake_are_nudged(
    tmp_path: Path,
) -> None:
    stand = Stand(tmp_path)
    # A nudge is awaited 10 s before another sidecar is asked in its place: a
    # stand-in asked exits well within that, so exactly one is asked a start.
    fleet = Fleet(stand.make, sleeps=True, max_awake=2, say=lambda line: None, nudge_every=10)
    deps = [f"dep_{n}" for n in range(6)]
    async with running(fleet):
        assert [fleet.wake(dep) for dep in deps] == [True] * 6
        assert list(fleet.children) == deps[:2] and list(fleet.waiting) == deps[2:]
        assert not fleet.wake(deps[0]) and not fleet.wake(deps[5])  # started or queued once
        most = [0]
        await sampling(fleet, most, lambda: not fleet.waiting and len(fleet.asleep) == 4)
        # Which four depends on which was ready first (a nudge waits for the
        # handler); the last one started was never asked.
        awake = list(fleet.children)
        assert len(awake) == 2 and deps[5] in awake
        assert set(fleet.asleep) == set(deps) - set(awake)
        # Nobody waits any more: the awake are left alone (their idle time,
        # standing in here for a signal, puts them to sleep). A nudge would
        # end one within a tick of 0.25 s: watching for four ticks is the
        # only way to see none comes.
        await anyio.sleep(1.0)
        assert list(fleet.children) == awake
        for child in fleet.children.values():
            child.send_signal(signal.SIGUSR1)
        await sampling(fleet, most, lambda: set(fleet.asleep) == set(deps))
    assert most[0] == 2 and fleet.most_awake == 2
    assert stand.made == deps  # first come, first started
    assert [stand.starts(dep) for dep in deps] == [1] * 6  # asleep: never restarted
    assert not fleet.children and not fleet.waiting


@pytest.mark.anyio
async def test_one_start_waiting_puts_one_idle_sidecar_to_sleep_not_all(tmp_path: Path) -> None:
    stand = Stand(tmp_path)
    fleet = Fleet(stand.make, sleeps=True, max_awake=3, say=lambda line: None, nudge_every=10)
    deps = [f"dep_{n}" for n in range(4)]
    async with running(fleet):
        for dep in deps[:3]:
            fleet.wake(dep)
        await wait_for(
            lambda: all((tmp_path / dep / "ready").exists() for dep in deps[:3]),
            what="three idle sidecars",
        )
        assert fleet.wake(deps[3]) and list(fleet.waiting) == deps[3:]
        await wait_for(lambda: deps[3] in fleet.children, what="the fourth started")
        assert len(fleet.asleep) == 1 and not fleet.waiting
        await anyio.sleep(1.0)  # four nudge ticks: none comes, nobody waits
        assert len(fleet.asleep) == 1 and len(fleet.children) == 3
    assert [stand.starts(dep) for dep in deps] == [1] * 4


@pytest.mark.anyio
async def test_a_booting_sidecar_is_not_nudged_to_death(tmp_path: Path) -> None:
    """SIGUSR1 before the sidecar's handler is in place would kill it: it waits."""
    stand = Stand(tmp_path, boot=1.0)
    fleet = Fleet(stand.make, sleeps=True, max_awake=1, say=lambda line: None)
    async with running(fleet):
        fleet.wake("dep_a")
        fleet.wake("dep_b")
        await wait_for(lambda: set(fleet.asleep) == {"dep_a"}, what="dep_a nudged asleep")
        await wait_for(lambda: stand.starts("dep_b") == 1, what="dep_b started")
    assert stand.starts("dep_a") == 1  # not killed by a nudge, then restarted


@pytest.mark.anyio
async def test_a_crash_loop_gives_its_slot_to_the_starts_that_wait(tmp_path: Path) -> None:
    stand = Stand(tmp_path)
    stand.crashing.add("dep_crash")
    fleet = Fleet(stand.make, sleeps=True, max_awake=1, say=lambda line: None)
    most = [0]
    async with running(fleet):
        assert fleet.wake("dep_crash") and fleet.wake("dep_b")
        assert list(fleet.children) == ["dep_crash"] and list(fleet.waiting) == ["dep_b"]
        # dep_b starts while dep_crash waits out its backoff; dep_crash, queued
        # again, has it nudged asleep and gets the slot back.
        await sampling(fleet, most, lambda: "dep_b" in fleet.asleep)
        starts = stand.starts("dep_crash")
        await sampling(fleet, most, lambda: stand.starts("dep_crash") > starts + 2)
        # Nobody else waits: it keeps crashing, restarted, slot or not.
        assert set(fleet.started()) == {"dep_crash"} and not fleet.waiting
        assert not fleet.wake("dep_crash")  # it has one already
    assert stand.starts("dep_b") == 1
    assert most[0] == 1 and fleet.most_awake == 1
    assert not fleet.started() and not fleet.waiting


@pytest.mark.anyio
async def test_the_listing_starts_the_awake_and_leaves_the_asleep(tmp_path: Path) -> None:
    stand = Stand(tmp_path)
    stand.unknown.add("dep_elsewhere")
    fleet = Fleet(stand.make, sleeps=True, max_awake=5, say=lambda line: None)
    async with running(fleet):
        listed = {
            "dep_up": "deployed",
            "dep_zz": "asleep",
            "dep_paused": "paused",
            "dep_elsewhere": "deployed",
            "dep_gone": "deleted",
        }
        fleet.sync(listed, anyio.current_time())
        assert set(fleet.children) == {"dep_up", "dep_paused"}
        # It falls asleep (a nudge stands in for its idle time).
        await wait_for(lambda: (tmp_path / "dep_up" / "ready").exists(), what="dep_up ready")
        fleet.children["dep_up"].send_signal(signal.SIGUSR1)
        await wait_for(lambda: "dep_up" in fleet.asleep, what="dep_up asleep")
        fell_asleep = fleet.asleep["dep_up"]
        # A listing asked for before it fell asleep (still "deployed") does
        # not restart it; "asleep" or "paused" after it does not either.
        fleet.sync(listed, fell_asleep - 0.1)
        fleet.sync({**listed, "dep_up": "asleep"}, anyio.current_time())
        fleet.sync({**listed, "dep_up": "paused"}, anyio.current_time())
        assert "dep_up" not in fleet.children and stand.starts("dep_up") == 1
        # Awake in a later listing: another process of it was welcomed.
        fleet.sync(listed, anyio.current_time())
        await wait_for(lambda: stand.starts("dep_up") == 2, what="dep_up restarted")
        # The hub names the asleep one: started; one it cannot run: not.
        assert fleet.wake("dep_zz") and not fleet.wake("dep_elsewhere")
        await wait_for(lambda: stand.starts("dep_zz") == 1, what="dep_zz woken")
        # No longer listed live: stopped, its slot kept until it has exited.
        fleet.sync({"dep_zz": "deployed"}, anyio.current_time())
        await wait_for(lambda: set(fleet.children) == {"dep_zz"}, what="the others stopped")
        assert fleet.asleep == {}  # forgotten: no longer listed
        fleet.sync({"dep_zz": "deleted"}, anyio.current_time())
        await wait_for(lambda: not fleet.children, what="dep_zz stopped")


@pytest.mark.anyio
async def test_a_sync_of_changes_leaves_what_it_does_not_name_as_it_is(tmp_path: Path) -> None:
    """A poll that lists only what changed does not stop the sidecars it does
    not name; one it names deleted is stopped; one it names that has no
    restore record yet is kept as unsettled, and started once it has one."""
    stand = Stand(tmp_path)
    stand.unknown.add("dep_later")
    fleet = Fleet(stand.make, sleeps=True, max_awake=5, say=lambda line: None)
    async with running(fleet):
        fleet.sync({"dep_up": "deployed", "dep_zz": "asleep"}, anyio.current_time())
        assert set(fleet.children) == {"dep_up"} and fleet.unsettled == set()
        changes = {"dep_new": "deployed", "dep_later": "deployed"}
        fleet.sync(changes, anyio.current_time(), whole=False)
        assert set(fleet.children) == {"dep_up", "dep_new"}
        assert fleet.unsettled == {"dep_later"}
        # Its record came: the next poll lists it again with its changes.
        stand.unknown.discard("dep_later")
        fleet.sync({dep: "deployed" for dep in fleet.unsettled}, anyio.current_time(), whole=False)
        assert set(fleet.children) == {"dep_up", "dep_new", "dep_later"}
        assert fleet.unsettled == set()
        fleet.sync({"dep_new": "deleted"}, anyio.current_time(), whole=False)
        await wait_for(lambda: set(fleet.children) == {"dep_up", "dep_later"}, what="stopped")
        assert stand.made.count("dep_up") == 1 and "dep_zz" not in stand.made
        # A whole listing without them: gone.
        fleet.sync({"dep_zz": "asleep"}, anyio.current_time())
        await wait_for(lambda: not fleet.children, what="the unlisted stopped")


@pytest.mark.anyio
async def test_always_on_starts_the_asleep_without_a_limit(tmp_path: Path) -> None:
    stand = Stand(tmp_path)
    fleet = Fleet(stand.make, sleeps=False, max_awake=1, say=lambda line: None)
    async with running(fleet):
        fleet.sync({"dep_a": "asleep", "dep_b": "deployed"}, anyio.current_time())
        assert set(fleet.children) == {"dep_a", "dep_b"} and not fleet.waiting


class FlakyHub:
    """A hub client whose wake list fails ``down`` times, then names ``named``."""

    def __init__(self, down: int, named: list[str]) -> None:
        self.down = down
        self.named = named
        self.calls: list[float] = []

    async def wakes(self, wait: float) -> list[str]:
        self.calls.append(anyio.current_time())
        if len(self.calls) <= self.down:
            raise HubUnreachable("cannot reach the hub")
        if len(self.calls) > self.down + 1:
            await anyio.sleep(wait)  # nothing new: the long poll runs out
            return []
        return self.named

    async def wakes_after(self, wait: float, cursor: str | None) -> tuple[list[str], None]:
        return await self.wakes(wait), None  # a hub that gives no cursor


@pytest.mark.anyio
async def test_the_wake_loop_outlives_a_hub_outage_with_jittered_backoff(
    tmp_path: Path,
) -> None:
    stand = Stand(tmp_path)
    fleet = Fleet(stand.make, sleeps=True, max_awake=5, say=lambda line: None)
    dep = new_id("dep")
    hub = FlakyHub(down=6, named=[dep, "../etc"])
    said: list[str] = []
    backoff = Backoff(initial=0.02, maximum=0.08, jitter=True)
    async with running(fleet) as tg:
        tg.start_soon(
            lambda: wake_loop(fleet, hub, wait=5.0, say=said.append, backoff=backoff)  # type: ignore[arg-type]
        )
        await wait_for(lambda: stand.starts(dep) == 1, what="the named one woken")
    gaps = [b - a for a, b in itertools.pairwise(hub.calls[:7])]
    assert all(gap >= 0.01 for gap in gaps)  # never hammered
    assert len(set(gaps)) == len(gaps)  # jittered: no two delays alike
    assert stand.made == [dep]  # only well-formed ids become paths
    assert len(said) == 2  # the outage said once, its end once


class NamingHub:
    """A hub client whose wake list names ``named`` at once, every time."""

    def __init__(self, named: list[str]) -> None:
        self.named = named
        self.calls: list[float] = []

    async def wakes(self, wait: float) -> list[str]:
        self.calls.append(anyio.current_time())
        await anyio.lowlevel.checkpoint()
        return list(self.named)

    async def wakes_after(self, wait: float, cursor: str | None) -> tuple[list[str], None]:
        return await self.wakes(wait), None  # a hub that gives no cursor


@pytest.mark.anyio
async def test_another_hosts_deployment_named_for_ever_costs_a_bounded_rate(
    tmp_path: Path,
) -> None:
    stand = Stand(tmp_path)
    stranger, ours = new_id("dep"), new_id("dep")
    stand.unknown.add(stranger)  # no restore record here: another host's
    fleet = Fleet(stand.make, sleeps=True, max_awake=5, say=lambda line: None)
    hub = NamingHub([stranger])
    said: list[str] = []
    async with running(fleet) as tg:
        tg.start_soon(lambda: wake_loop(fleet, hub, wait=5.0, say=said.append))  # type: ignore[arg-type]
        await wait_for(lambda: len(hub.calls) >= 8, timeout=10, what="eight questions")
        # The pause grows to a second (jittered down to half at most): not
        # one question every quarter of a second for as long as it is named.
        assert hub.calls[7] - hub.calls[0] >= 2.5, hub.calls
        # Looked at after a backoff of its own (1 s, 2 s, 4 s, jittered: at
        # 0, 0.5, 1.5 and 3.5 s at the soonest), said once.
        assert stand.asked.count(stranger) <= 4, stand.asked
        assert len(said) == 1 and stranger in said[0]
        # One of this host's named meanwhile is started within a pause.
        hub.named.append(ours)
        await wait_for(lambda: fleet.has(ours), timeout=1.5, what="ours started")
    assert stand.made == [ours]


@pytest.mark.parametrize("named", [["../etc"], []], ids=["ill-formed", "no-wait"])
@pytest.mark.anyio
async def test_answers_at_once_that_start_nothing_are_not_asked_again_at_once(
    tmp_path: Path, named: list[str]
) -> None:
    """A hub that names only what is not an id, or answers an empty list
    without waiting: the loop pauses all the same."""
    stand = Stand(tmp_path)
    fleet = Fleet(stand.make, sleeps=True, max_awake=5, say=lambda line: None)
    hub = NamingHub(named)
    async with running(fleet) as tg:
        tg.start_soon(lambda: wake_loop(fleet, hub, wait=5.0, say=print))  # type: ignore[arg-type]
        await wait_for(lambda: len(hub.calls) >= 6, timeout=10, what="six questions")
    assert hub.calls[5] - hub.calls[0] >= 1.5, hub.calls
    assert stand.asked == []


class CursorHub:
    """A hub client that gives cursors: with the one it gave last, it
    answers once a name is added (news), else when the poll runs out."""

    def __init__(self, named: list[str]) -> None:
        self.named = named
        self.calls: list[float] = []
        self.log: list[str] = []  # "ask", and "name <dep>"
        self._news = anyio.Event()
        self._count = 0

    def name(self, dep: str) -> None:
        self.log.append(f"name {dep}")
        self.named.append(dep)
        self._count += 1
        self._news.set()
        self._news = anyio.Event()

    async def wakes_after(self, wait: float, cursor: str | None) -> tuple[list[str], str]:
        self.calls.append(anyio.current_time())
        self.log.append("ask")
        if cursor == str(self._count):
            with anyio.move_on_after(wait):
                await self._news.wait()
        await anyio.lowlevel.checkpoint()
        return list(self.named), str(self._count)


@pytest.mark.anyio
async def test_with_cursors_a_wake_is_started_at_once_while_another_is_still_named(
    tmp_path: Path,
) -> None:
    stand = Stand(tmp_path, boot=30.0)  # never welcomed: named all along
    booting, mailed = new_id("dep"), new_id("dep")
    hub = CursorHub([booting])

    def make(dep: str) -> Child | None:
        hub.log.append(f"make {dep}")
        return stand.make(dep)

    fleet = Fleet(make, sleeps=True, max_awake=5, say=lambda line: None)
    async with running(fleet) as tg:
        tg.start_soon(lambda: wake_loop(fleet, hub, wait=5.0, say=print))  # type: ignore[arg-type]
        await wait_for(lambda: fleet.has(booting), what="the first started")
        # Its name stays: the loop waits for news, asking again within a
        # pause (held by a sidecar of ours), not at once.
        await wait_for(lambda: len(hub.calls) >= 4, timeout=10, what="four questions")
        gaps = [b - a for a, b in itertools.pairwise(hub.calls[1:4])]
        assert all(gap >= 0.1 for gap in gaps), gaps
        # News is started by the answer to the question in flight, not
        # after a pause and another question.
        hub.name(mailed)
        await wait_for(lambda: fleet.has(mailed), timeout=5, what="news started")
        after = hub.log[hub.log.index(f"name {mailed}") :]
        assert after[:2] == [f"name {mailed}", f"make {mailed}"], hub.log
    assert stand.made == [booting, mailed]


@pytest.mark.anyio
async def test_a_wakes_start_is_asked_for_before_the_next_question(tmp_path: Path) -> None:
    """The fork server's request (the start's first step) goes out before the
    wake loop asks the hub again: the question wakes the hub, which would
    compete for a core with the fork server's wake."""
    named = new_id("dep")
    hub = CursorHub([named])

    async def start(spec: ChildSpec) -> Handle:
        hub.log.append(f"start {spec.name}")
        await anyio.sleep_forever()
        raise AssertionError("never started")

    def make(dep: str) -> Child:
        return Child(ChildSpec(f"sidecar-{dep}", ["true"]), start=start)

    fleet = Fleet(make, sleeps=True, max_awake=5, say=lambda line: None)
    async with running(fleet) as tg:
        tg.start_soon(lambda: wake_loop(fleet, hub, wait=5.0, say=print))  # type: ignore[arg-type]
        await wait_for(lambda: hub.log.count("ask") >= 2, what="a second question")
        assert hub.log[:3] == ["ask", f"start sidecar-{named}", "ask"], hub.log


@pytest.mark.anyio
async def test_with_cursors_a_name_whose_sidecar_fell_asleep_meanwhile_is_started_again(
    tmp_path: Path,
) -> None:
    """The hub names a deployment (work came just as its sidecar fell
    asleep) while the sidecar is on its way out: no news follows, and the
    loop starts it again once it has exited, within a pause."""
    stand = Stand(tmp_path)
    dep = new_id("dep")
    fleet = Fleet(stand.make, sleeps=True, max_awake=5, say=lambda line: None)
    hub = CursorHub([dep])
    async with running(fleet) as tg:
        tg.start_soon(lambda: wake_loop(fleet, hub, wait=30.0, say=print))  # type: ignore[arg-type]
        await wait_for(lambda: (tmp_path / dep / "ready").exists(), what="its sidecar ready")
        (tmp_path / dep / "ready").unlink()
        fleet.children[dep].send_signal(signal.SIGUSR1)  # it falls asleep
        await wait_for(lambda: stand.starts(dep) == 2, timeout=5, what="started again")
    assert stand.made == [dep, dep]


@pytest.mark.parametrize(
    ("args", "idle_stop", "max_awake"),
    [
        ([], 300.0, 200),
        (["--idle-stop", "1.5", "--max-awake", "7"], 1.5, 7),
        (["--idle-stop", "0"], 0.0, 200),
    ],
)
def test_up_hands_its_scale_to_zero_options_to_the_supervisor(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: list[str],
    idle_stop: float,
    max_awake: int,
) -> None:
    seen: list[UpSettings] = []

    async def run_up(settings: UpSettings, *, task_status: object) -> None:
        seen.append(settings)  # and returns before it ever started

    monkeypatch.setattr(hub.up, "run_up", run_up)
    result = CliRunner().invoke(main, ["up", "--state-dir", str(tmp_path), *args])
    assert seen, result.output
    assert (seen[0].idle_stop, seen[0].max_awake, seen[0].sleeps) == (
        idle_stop,
        max_awake,
        idle_stop > 0,
    )


@pytest.mark.parametrize("args", [["--idle-stop", "-1"], ["--max-awake", "0"]])
def test_up_refuses_a_negative_idle_time_and_no_slot(args: list[str]) -> None:
    result = CliRunner().invoke(main, ["up", *args])
    assert result.exit_code == 2, result.output
