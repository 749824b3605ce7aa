"""A workflow's handler in the sidecar: steps past their budget, a handler past
its timeout, state across restarts and envelopes processed from disk with no
hub, a handler that raises (once, always), state that is not JSON, a run
completed, a send committed. On an in-memory bus, against a scripted hub."""

from __future__ import annotations

import logging
from pathlib import Path
from traceback import format_exception

import msgspec
import pytest

from runtime import (
    DispatchProcessed,
    MailSent,
    RunCompleted,
    RunFailed,
    RunStarted,
)
from runtime.testing import MemoryBus
from sidecar import RunsConfig
from tests.sidecar.app.records import seen
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    APPLIED,
    FAST_POLICY,
    Deployment,
    FakeHub,
    deployed_sidecar,
    fake_hub,
    mail,
    make_deployment,
    running_sidecar,
)


async def deliver_in_one_frame(hub: FakeHub, dep: Deployment, n: int) -> None:
    """Mails m1..mn to ``dep`` in one MailBatch frame, each stored."""
    frames = [mail(dep, seq, f"m{seq}") for seq in range(1, n + 1)]
    assert [a.result for a in (await hub.deliver_batch(frames)).acks] == ["stored"] * n


def recording(tmp_path: Path, middle: str) -> tuple[Deployment, Path]:
    """A deployment whose handler writes each item's subject to the file it
    returns beside it, runs ``middle`` (lines of the handler), then records
    the item in the run's state."""
    calls = tmp_path / "calls"
    source = f"""
import os, anyio
async def main(ctx, item):
    with open({str(calls)!r}, "a") as f:
        f.write(item.subject + "\\n"){middle}
    ctx.state.setdefault("seen", []).append({{"subject": item.subject}})
"""
    return make_deployment(tmp_path / "state", source=source), calls


@pytest.mark.anyio
async def test_a_step_that_ran_past_its_budget_commits_before_the_next_envelope(
    tmp_path: Path,
) -> None:
    # m1 takes longer than a step's budget, m2 waits for the gate: m1's
    # commit (and its event) must not wait for m2, though both came in one
    # frame and are read in one batch.
    gate = tmp_path / "gate"
    dep, calls = recording(
        tmp_path,
        f"""
    if item.subject == "m1":
        await anyio.sleep({RunsConfig().step_budget * 1.5})  # a slow item
    while item.subject == "m2" and not os.path.exists({str(gate)!r}):
        await anyio.sleep(0.005)""",
    )
    async with deployed_sidecar(dep) as (hub, _):
        await deliver_in_one_frame(hub, dep, 3)
        await hub.wait_events(DispatchProcessed, 1)
        assert dep.query("SELECT seq FROM inbox WHERE outcome = 'processed'") == [(1,)]
        gate.touch()
        await hub.wait_events(DispatchProcessed, 3)
    assert [s["subject"] for s in seen(hub.of_kind(DispatchProcessed))] == ["m1", "m2", "m3"]
    # Not m1 committed by m2's failing (a handler timeout keeps what the
    # batch did before it): each handler ran once.
    assert calls.read_text().split() == ["m1", "m2", "m3"]


@pytest.mark.slow  # waits out a handler timeout
@pytest.mark.anyio
async def test_a_handler_past_its_timeout_fails_alone_and_its_item_is_retried(
    tmp_path: Path,
) -> None:
    # m2 hangs on its first call, in the step that began with m1: the step
    # commits m1 with m2's failed attempt, m2's call is cancelled at its
    # timeout, and its retry processes m2, then m3.
    hung = tmp_path / "hung"
    dep, calls = recording(
        tmp_path,
        f"""
    if item.subject == "m2" and not os.path.exists({str(hung)!r}):
        open({str(hung)!r}, "w").close()
        await anyio.sleep(3600)  # only its timeout ends it""",
    )
    policy = msgspec.structs.replace(FAST_POLICY, handler_timeout=0.5)
    async with deployed_sidecar(dep, policy=policy) as (hub, _):
        await deliver_in_one_frame(hub, dep, 3)
        await hub.wait_events(DispatchProcessed, 3)
    assert [s["subject"] for s in seen(hub.of_kind(DispatchProcessed))] == ["m1", "m2", "m3"]
    assert calls.read_text().split() == ["m1", "m2", "m2", "m3"]


@pytest.mark.anyio
async def test_state_survives_a_restart_and_nothing_is_processed_twice(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    async with fake_hub(bus, dep) as hub:
        async with running_sidecar(bus, dep):
            for seq in (1, 2):
                await hub.deliver(mail(dep, seq, f"m{seq}"))
            await hub.wait_events(DispatchProcessed, 2)
        # Stored while the sidecar was down? No: it is down, so seq 3 comes after.
        async with running_sidecar(bus, dep):
            await hub.deliver(mail(dep, 3, "m3"))
            await hub.wait_events(DispatchProcessed, 3)
            # Acknowledged events leave the outbox, their envelopes their bodies.
            await wait_for(lambda: dep.query(APPLIED) == [(3, 0)])
    processed = hub.of_kind(DispatchProcessed)
    assert sorted(e.seq or 0 for e in processed) == [1, 2, 3]
    assert [s["subject"] for s in seen(processed)] == ["m1", "m2", "m3"]
    assert len(hub.of_kind(RunStarted)) == 1


@pytest.mark.slow  # a sidecar stopped and started again
@pytest.mark.anyio
async def test_envelopes_stored_before_a_stop_are_processed_from_disk_without_a_hub(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    source = f"""
import os, anyio
async def main(ctx, item):
    while not os.path.exists({str(gate)!r}):
        await anyio.sleep(0.005)
    ctx.state.setdefault("seen", []).append(item.subject)
"""
    dep = make_deployment(tmp_path / "state", source=source)
    async with deployed_sidecar(dep) as (hub, _):
        for seq in (1, 2):
            assert (await hub.deliver(mail(dep, seq, f"m{seq}"))).result == "stored"
    # Stopped while the handler was stuck on seq 1: nothing was committed.
    assert dep.query("SELECT count(*) FROM inbox WHERE state = 'pending'") == [(2,)]
    assert dep.query("SELECT count(*) FROM run_state") == [(0,)]
    gate.touch()
    async with running_sidecar(MemoryBus(), dep, wait_session=False):  # no hub at all now
        await wait_for(
            lambda: dep.query("SELECT count(*) FROM inbox WHERE state = 'done'") == [(2,)]
        )
    (state,) = dep.query("SELECT state FROM run_state")
    assert msgspec.msgpack.decode(state[0]) == {"seen": ["m1", "m2"]}
    assert dep.query("SELECT kind FROM outbox ORDER BY pos") == [
        ("RunStarted",),
        ("DispatchProcessed",),
        ("DispatchProcessed",),
    ]


@pytest.mark.anyio
async def test_a_handler_that_raises_once_is_retried_from_the_committed_state(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        for seq, subject in enumerate(["a", "flaky", "b"], start=1):
            await hub.deliver(mail(dep, seq, subject))
        await hub.wait_events(DispatchProcessed, 3)
    # The failed attempt appended to the state before raising; that is gone.
    assert [s["subject"] for s in seen(hub.of_kind(DispatchProcessed))] == ["a", "flaky", "b"]
    assert hub.of_kind(RunFailed) == []


@pytest.mark.anyio
async def test_a_handler_that_always_raises_fails_the_run_and_does_not_wedge(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "ok"))
        await hub.deliver(mail(dep, 2, "poison"))
        await hub.deliver(mail(dep, 3, "later"))
        await hub.wait_events(DispatchProcessed, 3)
        await hub.wait_events(RunFailed, 1)
    failed = hub.of_kind(RunFailed)[0]
    assert "poisoned mail" in failed.error
    outcomes = {e.seq: e.outcome for e in hub.of_kind(DispatchProcessed)}
    assert outcomes == {1: "processed", 2: "failed", 3: "refused_terminal"}
    assert dep.query("SELECT status, error FROM run") == [("failed", failed.error)]
    assert dep.query("SELECT seq, outcome FROM inbox ORDER BY seq") == [
        (1, "processed"),
        (2, "failed"),
        (3, "refused_terminal"),
    ]


@pytest.mark.anyio
async def test_a_handler_failure_is_logged_with_its_traceback_and_kept_as_the_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        poison = mail(dep, 1, "poison")
        await hub.deliver(poison)
        await hub.wait_events(RunFailed, 1)
    assert hub.of_kind(RunFailed)[0].error == "ValueError: poisoned mail"
    assert dep.query("SELECT error FROM run") == [("ValueError: poisoned mail",)]
    crashes = [r for r in caplog.records if "failed" in r.getMessage() and r.exc_info]
    # Each attempt is logged, the one past the budget too.
    assert len(crashes) == FAST_POLICY.max_attempts
    for record in crashes:
        assert record.levelno == logging.WARNING
        assert record.getMessage().endswith("ValueError: poisoned mail")
        assert record.exc_info is not None
        traceback = "".join(format_exception(*record.exc_info))
        assert 'raise ValueError("poisoned mail")' in traceback  # the handler's own line
        assert f"handling dispatch {poison.dispatch_id} (seq 1) of run {dep.address}" in traceback


@pytest.mark.anyio
async def test_state_that_is_not_json_fails_the_run_with_a_typed_error(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "not-json"))
        await hub.wait_events(RunFailed, 1)
    assert hub.of_kind(RunFailed)[0].error.startswith("StateNotSerializable")


@pytest.mark.anyio
async def test_complete_ends_the_run_and_later_items_are_refused_terminal(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        for seq, subject in enumerate(["a", "stop", "late"], start=1):
            await hub.deliver(mail(dep, seq, subject))
        await hub.wait_events(DispatchProcessed, 3)
    (completed,) = hub.of_kind(RunCompleted)
    assert completed.result == {"count": 2}
    assert {e.seq: e.outcome for e in hub.of_kind(DispatchProcessed)}[3] == "refused_terminal"
    assert dep.query("SELECT status, result FROM run") == [("completed", b'{"count":2}')]


@pytest.mark.anyio
async def test_send_is_committed_as_a_mail_sent_event(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "send", b"payload"))
        await hub.wait_events(MailSent, 1)
    (sent,) = hub.of_kind(MailSent)
    assert (sent.to, sent.subject, sent.body) == ("someone@example.org", "hello", b"payload")
