"""Failure policies in the sidecar: past its retry budget an item suspends
its run (held with every later one until a resume), is parked (the run goes
on; the hub may retry it), or fails its run; attempts are counted in the
inbox, across restarts; the policy comes from the hub."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from runtime import (
    DispatchProcessed,
    FrameDecoder,
    MailInbound,
    RunFailed,
    RunSnapshot,
    RunStarted,
    encode,
    new_id,
)
from runtime.testing import MemoryBus
from runtime.wire import (
    LEGACY_POLICY,
    FailurePolicy,
    OnFailure,
    PolicySet,
    RunSuspended,
    SetPolicy,
)
from sidecar import Inbox
from sidecar.execution import Runs
from sidecar.execution._pacing import retry_delay
from sidecar.storage import Commit, Envelope
from sidecar.storage._attempts import DIED
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    FAST_POLICY,
    Deployment,
    FakeHub,
    deployed_sidecar,
    fake_hub,
    mail,
    make_deployment,
    running_sidecar,
)

pytestmark = pytest.mark.anyio


def failing(tmp_path: Path, extra: str = "") -> tuple[Deployment, Path, Path]:
    """A deployment whose handler fails on ``poison`` until the file ``fixed``
    exists; each call appends its subject to the file ``calls``."""
    fixed, calls = tmp_path / "fixed", tmp_path / "calls"
    source = f"""
import os

import anyio


async def main(ctx, item):
    with open({str(calls)!r}, "a") as f:
        f.write(item.subject + "\\n")
    ctx.state.setdefault("seen", []).append(item.subject)
    if item.subject == "poison" and not os.path.exists({str(fixed)!r}):
        raise ValueError("poisoned mail")
{extra}
"""
    return make_deployment(tmp_path / "state", source=source), fixed, calls


def policy(on_failure: str, **kw: float) -> FailurePolicy:
    fields = {"max_attempts": 2, "max_backoff": 0.02, "handler_timeout": 5.0, **kw}
    return FailurePolicy(on_failure=on_failure, **fields)  # type: ignore[arg-type]


def resume(dep: Deployment, seq: int, run_id: str | None = None, version: int = 0) -> MailInbound:
    return mail(dep, seq, "", b"", kind="resume", run_id=run_id, version=version)


def outcomes(hub: FakeHub) -> dict[int | None, str]:
    return {e.seq: e.outcome for e in hub.of_kind(DispatchProcessed)}


def by_step(hub: FakeHub, run_id: str) -> list[DispatchProcessed]:
    done = [e for e in hub.of_kind(DispatchProcessed) if e.run_id == run_id]
    return sorted(done, key=lambda e: e.step)


def held(dep: Deployment) -> list[int]:
    return [s for (s,) in dep.query("SELECT seq FROM inbox WHERE state = 'held' ORDER BY seq")]


async def test_suspend_holds_the_failing_item_and_later_ones_and_resume_releases_them_in_order(
    tmp_path: Path,
) -> None:
    dep, fixed, calls = failing(tmp_path)
    other = new_id("run")
    async with deployed_sidecar(dep, policy=policy(OnFailure.SUSPEND)) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        poison = mail(dep, 2, "poison")
        await hub.deliver(poison)
        await hub.wait_events(RunSuspended, 1)
        (suspended,) = hub.of_kind(RunSuspended)
        assert (suspended.dispatch_id, suspended.attempts) == (poison.dispatch_id, 2)
        assert suspended.error == "ValueError: poisoned mail"
        # Mail to the suspended run is taken and held; other runs go on.
        for seq, subject in ((3, "b"), (4, "c")):
            assert (await hub.deliver(mail(dep, seq, subject))).result == "stored"
        await hub.deliver(mail(dep, 5, "elsewhere", run_id=other))
        await wait_for(lambda: 5 in outcomes(hub), what="the other run's mail processed")
        assert held(dep) == [2, 3, 4]
        assert dep.query("SELECT status FROM run WHERE run_id = ?", dep.address) == [("suspended",)]
        fixed.touch()
        await hub.deliver(resume(dep, 6))
        await hub.deliver(mail(dep, 7, "d"))
        await wait_for(lambda: len(outcomes(hub)) == 7, what="everything processed")
    steps = by_step(hub, dep.address)
    assert [e.seq for e in steps] == [1, 6, 2, 3, 4, 7]  # the resume overtakes what it releases
    assert [e.step for e in steps] == [1, 2, 3, 4, 5, 6]
    assert steps[-1].state["seen"] == ["a", "poison", "b", "c", "d"]
    assert all(e.outcome == "processed" for e in steps)
    # The handler never saw the resume; it saw poison twice and then once more.
    seen = ["a", "poison", "poison", "elsewhere", "poison", "b", "c", "d"]
    assert calls.read_text().split() == seen
    assert held(dep) == []
    assert dep.query("SELECT status FROM run WHERE run_id = ?", dep.address) == [("running",)]


async def test_a_resume_gives_what_the_run_held_its_attempts_anew(tmp_path: Path) -> None:
    dep, _, calls = failing(tmp_path)
    async with deployed_sidecar(dep, policy=policy(OnFailure.SUSPEND)) as (hub, _):
        await hub.deliver(mail(dep, 1, "poison"))
        await hub.wait_events(RunSuspended, 1)
        await hub.deliver(mail(dep, 2, "b"))
        await wait_for(lambda: held(dep) == [1, 2], what="both held")
        await hub.deliver(resume(dep, 3))
        await hub.wait_events(RunSuspended, 2)  # still broken: two attempts more
        # Suspended again on a row it held already: the status is written.
        status = dep.query("SELECT status FROM run WHERE run_id = ?", dep.address)
        assert status == [("suspended",)]
    assert held(dep) == [1, 2]
    assert dep.query("SELECT seq, attempts FROM inbox WHERE state = 'held' ORDER BY seq") == [
        (1, 2),
        (2, 0),
    ]
    assert calls.read_text().split() == ["poison"] * 4
    assert outcomes(hub) == {3: "processed"}


async def test_a_resume_for_a_run_that_is_not_suspended_changes_nothing(tmp_path: Path) -> None:
    dep, _, calls = failing(tmp_path)
    async with deployed_sidecar(dep, policy=policy(OnFailure.SUSPEND)) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        await hub.deliver(resume(dep, 2))
        await hub.deliver(mail(dep, 3, "b"))
        await hub.wait_events(DispatchProcessed, 3)
    assert outcomes(hub) == {1: "processed", 2: "processed", 3: "processed"}
    assert calls.read_text().split() == ["a", "b"]
    assert by_step(hub, dep.address)[1].state == {"seen": ["a"]}


async def test_park_sets_the_item_aside_the_run_goes_on_and_a_retry_is_processed_once(
    tmp_path: Path,
) -> None:
    dep, fixed, calls = failing(tmp_path)
    async with deployed_sidecar(dep, policy=policy(OnFailure.PARK)) as (hub, _):
        poison = mail(dep, 1, "poison")
        await hub.deliver(poison)
        await hub.deliver(mail(dep, 2, "b"))
        await hub.wait_events(DispatchProcessed, 2)
        (parked,) = [e for e in hub.of_kind(DispatchProcessed) if e.outcome == "parked"]
        assert (parked.dispatch_id, parked.error) == (
            poison.dispatch_id,
            "ValueError: poisoned mail",
        )
        # Once the hub has it, its body goes; the retry brings it back.
        await wait_for(
            lambda: dep.query("SELECT length(envelope) FROM inbox WHERE seq = 1") == [(0,)],
            what="the parked row compacted",
        )
        fixed.touch()
        retry = msgspec.structs.replace(poison, seq=3)
        assert (await hub.deliver(retry)).result == "stored"
        await hub.wait_events(DispatchProcessed, 3)
        assert (await hub.deliver(retry)).result == "duplicate"
        await hub.deliver(mail(dep, 4, "c"))
        await hub.wait_events(DispatchProcessed, 4)
    steps = by_step(hub, dep.address)
    assert [(e.seq, e.outcome) for e in steps] == [
        (1, "parked"),
        (2, "processed"),
        (3, "processed"),
        (4, "processed"),
    ]
    assert steps[-1].state["seen"] == ["b", "poison", "c"]
    assert calls.read_text().split() == ["poison", "poison", "b", "poison", "c"]
    assert dep.query(
        "SELECT seq, outcome, attempts FROM inbox WHERE dispatch_id = ?", poison.dispatch_id
    ) == [(3, "processed", 0)]


async def test_fail_fails_the_run_after_its_attempts_with_the_error_on_the_item(
    tmp_path: Path,
) -> None:
    dep, _, calls = failing(tmp_path)
    async with deployed_sidecar(dep, policy=policy(OnFailure.FAIL, max_attempts=4)) as (hub, _):
        await hub.deliver(mail(dep, 1, "poison"))
        await hub.deliver(mail(dep, 2, "b"))
        await hub.wait_events(DispatchProcessed, 2)
        await hub.wait_events(RunFailed, 1)
    failed = {e.seq: e for e in hub.of_kind(DispatchProcessed)}
    assert (failed[1].outcome, failed[1].error) == ("failed", "ValueError: poisoned mail")
    assert failed[2].outcome == "refused_terminal"
    assert calls.read_text().split() == ["poison"] * 4
    assert dep.query("SELECT status, error FROM run") == [("failed", "ValueError: poisoned mail")]
    # Its first item failed before the run ever committed: it started once.
    assert len(hub.of_kind(RunStarted)) == 1


async def test_a_handler_past_its_timeout_is_a_failed_attempt(tmp_path: Path) -> None:
    dep, _, calls = failing(
        tmp_path, "    if item.subject == 'slow':\n        await anyio.sleep(60)"
    )
    slow = policy(OnFailure.PARK, handler_timeout=0.2)
    async with deployed_sidecar(dep, policy=slow) as (hub, _):
        await hub.deliver(mail(dep, 1, "slow"))
        await hub.deliver(mail(dep, 2, "b"))
        await hub.wait_events(DispatchProcessed, 2)
    parked = {e.seq: e for e in hub.of_kind(DispatchProcessed)}[1]
    assert parked.outcome == "parked"
    assert parked.error.startswith("HandlerTimeout: handler did not return within 0.2s")
    assert calls.read_text().split() == ["slow", "slow", "b"]


async def test_an_error_a_retry_cannot_fix_goes_to_the_policy_at_once(tmp_path: Path) -> None:
    big = "    if item.subject == 'big':\n        ctx.state['x'] = 'x' * 400_000"
    dep, _, calls = failing(tmp_path, big)
    async with deployed_sidecar(dep, policy=policy(OnFailure.SUSPEND, max_attempts=5)) as (hub, _):
        await hub.deliver(mail(dep, 1, "big"))
        await hub.wait_events(RunSuspended, 1)
    (suspended,) = hub.of_kind(RunSuspended)
    assert suspended.attempts == 1 and suspended.error.startswith("LimitExceeded")
    assert calls.read_text().split() == ["big"]


def test_the_backoff_doubles_from_a_tenth_of_a_second_and_is_capped() -> None:
    capped = FailurePolicy(max_backoff=0.5)
    for attempts in range(1, 40):
        delays = [retry_delay(capped, attempts) for _ in range(20)]
        ceiling = min(0.5, 0.1 * 2 ** (attempts - 1))
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert retry_delay(FailurePolicy(max_backoff=0), 3) == 0


async def test_retries_wait_their_backoff_and_do_not_spin(tmp_path: Path) -> None:
    stamps = tmp_path / "stamps"
    dep, _, _ = failing(
        tmp_path,
        f"    with open({str(stamps)!r}, 'a') as f:\n"
        "        f.write(str(__import__('time').monotonic()) + ' ')\n"
        "    raise RuntimeError('always')",
    )
    async with deployed_sidecar(
        dep, policy=policy(OnFailure.PARK, max_attempts=5, max_backoff=0.2)
    ) as (
        hub,
        _,
    ):
        await hub.deliver(mail(dep, 1, "x"))
        await hub.wait_events(DispatchProcessed, 1)
    times = [float(t) for t in stamps.read_text().split()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 4
    # 0.1 s doubling, jittered down to half, capped at 0.2 s.
    for gap, ceiling in zip(gaps, [0.1, 0.2, 0.2, 0.2], strict=True):
        assert gap >= ceiling / 2 - 0.01


async def test_attempts_survive_a_restart_and_an_orderly_stop_charges_none(tmp_path: Path) -> None:
    # Its first call fails; its second hangs until the sidecar stops (not
    # the item's fault: not counted); the next process fails it twice more.
    calls = tmp_path / "calls"
    source = f"""
import anyio


async def main(ctx, item):
    with open({str(calls)!r}, "a") as f:
        f.write(item.subject + "\\n")
    with open({str(calls)!r}) as f:
        tried = f.read().split().count("poison")
    if tried == 2:
        await anyio.sleep(60)
    raise ValueError("poisoned mail")
"""
    dep = make_deployment(tmp_path / "state", source=source)
    bus = MemoryBus()
    async with fake_hub(bus, dep, policy=policy(OnFailure.SUSPEND, max_attempts=3)) as hub:
        async with running_sidecar(bus, dep):
            await hub.deliver(mail(dep, 1, "poison"))
            await wait_for(lambda: calls.exists() and len(calls.read_text().split()) == 2)
        assert dep.query("SELECT attempts, error FROM inbox") == [(1, "ValueError: poisoned mail")]
        async with running_sidecar(bus, dep):
            await hub.wait_events(RunSuspended, 1)
    assert hub.of_kind(RunSuspended)[0].attempts == 3
    assert dep.query("SELECT attempts, state FROM inbox") == [(3, "held")]
    assert calls.read_text().split() == ["poison"] * 4


async def test_set_policy_is_answered_kept_and_applied(tmp_path: Path) -> None:
    dep, _, _ = failing(tmp_path)
    decode = FrameDecoder(PolicySet)
    async with deployed_sidecar(dep, policy=None) as (hub, car):
        assert car.runs is not None and car.runs.policy == LEGACY_POLICY
        parking = policy(OnFailure.PARK, max_attempts=1)
        inbound = hub.subjects.inbound(dep.id)
        # A SetPolicy not stamped with the sidecar's session is not answered.
        with pytest.raises(Exception):  # noqa: B017 - no reply: a timeout
            await hub.transport.request(
                inbound, encode(SetPolicy(session_id=new_id("ses"), policy=parking)), 0.5
            )
        assert car.runs.policy == LEGACY_POLICY
        stamped = SetPolicy(session_id=hub.welcomes[-1].session_id, policy=parking)
        reply = await hub.transport.request(inbound, encode(stamped), 5.0)
        assert decode.decode(reply) == PolicySet(deployment_id=dep.id)
        assert car.runs.policy == parking
        await hub.deliver(mail(dep, 1, "poison"))
        await hub.wait_events(DispatchProcessed, 1)
    assert hub.of_kind(DispatchProcessed)[0].outcome == "parked"
    (kept,) = dep.query("SELECT value FROM meta WHERE key = 'policy'")
    assert msgspec.json.decode(kept[0], type=FailurePolicy) == parking
    # Restored without its hub, the sidecar goes by the last policy it had.
    inbox = await Inbox.open(dep.inbox_file)
    try:
        async with Runs(inbox=inbox, deployment_id=dep.id, handler=nothing) as runs:
            assert runs.policy == parking
    finally:
        await inbox.aclose()


async def nothing(ctx: Any, item: Any) -> None:
    pass


async def test_a_suspended_run_taken_over_from_the_hub_holds_until_resumed(
    tmp_path: Path,
) -> None:
    dep, _, calls = failing(tmp_path)
    run_id = new_id("run")
    suspended = RunSnapshot(
        run_id=run_id, status="suspended", state={"seen": ["a"]}, last_seq=1, last_step=1
    )
    async with deployed_sidecar(
        dep, from_hub=1, states=[suspended], floor_seq=1, policy=FAST_POLICY
    ) as (hub, _):
        await hub.deliver(mail(dep, 2, "b", run_id=run_id))
        await wait_for(lambda: held(dep) == [2], what="the mail held")
        await hub.deliver(resume(dep, 3, run_id))
        await hub.wait_events(DispatchProcessed, 2)
    assert [e.seq for e in by_step(hub, run_id)] == [3, 2]
    assert by_step(hub, run_id)[-1].state == {"seen": ["a", "b"]}
    assert calls.read_text().split() == ["b"]


async def test_after_a_pause_the_scheduler_resumes_on_its_own(tmp_path: Path) -> None:
    # A retry's backoff is waited out without new mail to wake the scheduler.
    dep, fixed, _ = failing(tmp_path)
    async with deployed_sidecar(
        dep, policy=policy(OnFailure.PARK, max_attempts=3, max_backoff=0.3)
    ) as (
        hub,
        _,
    ):
        await hub.deliver(mail(dep, 1, "poison"))
        await wait_for(lambda: dep.query("SELECT attempts FROM inbox") == [(1,)], what="a failure")
        fixed.touch()
        with anyio.fail_after(5):
            await hub.wait_events(DispatchProcessed, 1)
    assert hub.of_kind(DispatchProcessed)[0].outcome == "processed"


async def test_a_death_is_charged_to_the_one_item_in_flight_else_its_batch_is_suspect(
    tmp_path: Path,
) -> None:
    a, b = (Envelope(dispatch_id=new_id("dsp"), run_id="run_a", seq=seq) for seq in (1, 2))
    path = tmp_path / "inbox.db"
    inbox = await Inbox.open(path)
    await inbox.store([a, b])
    await inbox.mark_in_flight([a.dispatch_id])
    await inbox.aclose()  # as a process that died: nothing else ran
    inbox = await Inbox.open(path)
    try:
        assert await inbox.charge_crash() == []
        assert [(p.dispatch_id, p.attempts, p.failure) for p in await inbox.next_batch(8)] == [
            (a.dispatch_id, 1, DIED),
            (b.dispatch_id, 0, ""),
        ]
        assert await inbox.charge_crash() == []  # charged once
        await inbox.mark_in_flight([a.dispatch_id, b.dispatch_id])
        assert sorted(await inbox.charge_crash()) == sorted([a.dispatch_id, b.dispatch_id])
        assert [p.attempts for p in await inbox.next_batch(8)] == [1, 0]
        # A step's commit clears the mark: nothing died.
        await inbox.mark_in_flight([a.dispatch_id])
        await inbox.commit(Commit(run_id="run_a", status="running", consumed=[]))
        assert await inbox.charge_crash() == []
        assert [p.attempts for p in await inbox.next_batch(8)] == [1, 0]
    finally:
        await inbox.aclose()
