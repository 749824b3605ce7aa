"""A cancel from outside in the sidecar: the handler sees a ``cancel`` item
(with its reason) and the run ends ``cancelled`` whatever the call did; one
that terminates ends the run unseen; either overtakes what a waiting or a
suspended run holds, and what the run held, or gets later, is refused."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from runtime import DispatchProcessed, MailInbound, MailSent, RunCancelled, RunCompleted, new_id
from runtime.wire import CANCEL_KIND, FailurePolicy, OnFailure, RunSuspended
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    Deployment,
    FakeHub,
    deployed_sidecar,
    mail,
    make_deployment,
)

pytestmark = pytest.mark.anyio

POLICY = FailurePolicy(
    on_failure=OnFailure.SUSPEND, max_attempts=2, max_backoff=0.02, handler_timeout=5.0
)


def recording(tmp_path: Path) -> tuple[Deployment, Path]:
    """A deployment whose handler writes ``kind subject reason`` of each call
    to the file ``calls``: ``wait`` asks for an approval, ``poison`` raises,
    a cancel whose reason is ``boom`` raises, any other cancel completes."""
    calls = tmp_path / "calls"
    source = f"""
async def main(ctx, item):
    with open({str(calls)!r}, "a") as f:
        f.write(f"{{item.kind}} {{item.subject}} {{getattr(item, 'reason', '-')}}\\n")
    ctx.state.setdefault("seen", []).append(item.kind)
    if item.subject == "wait":
        await ctx.request_approval("go on?")
    if item.subject == "poison":
        raise ValueError("poisoned mail")
    if item.kind == "cancel":
        if item.reason == "boom":
            raise RuntimeError("cannot clean up")
        ctx.send("ops@example.org", "cleaned up", item.reason)
        ctx.complete("finished anyway")
"""
    return make_deployment(tmp_path / "state", source=source), calls


def cancel(dep: Deployment, seq: int, reason: str, *, terminate: bool = False) -> MailInbound:
    body = msgspec.json.encode({"reason": reason, "terminate": terminate})
    return mail(dep, seq, reason, body, kind=CANCEL_KIND, sender=None)


def outcomes(hub: FakeHub) -> dict[int | None, str]:
    return {e.seq: e.outcome for e in hub.of_kind(DispatchProcessed)}


def status(dep: Deployment) -> list[tuple[str]]:
    return dep.query("SELECT status FROM run WHERE run_id = ?", dep.address)


async def test_a_cancel_is_seen_by_the_handler_and_cancelled_wins_over_complete(
    tmp_path: Path,
) -> None:
    dep, calls = recording(tmp_path)
    async with deployed_sidecar(dep, policy=POLICY) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        await hub.deliver(cancel(dep, 2, "customer left"))
        await hub.deliver(mail(dep, 3, "late"))
        await hub.wait_events(DispatchProcessed, 3)
        await hub.wait_events(RunCancelled, 1)
        await hub.wait_events(MailSent, 1)
    assert outcomes(hub) == {1: "processed", 2: "processed", 3: "refused_terminal"}
    (cancelled,) = hub.of_kind(RunCancelled)
    assert (cancelled.run_id, cancelled.reason) == (dep.address, "customer left")
    assert hub.of_kind(RunCompleted) == []
    assert calls.read_text().splitlines() == ["mail a -", "cancel customer left customer left"]
    assert status(dep) == [("cancelled",)]
    # What the handler did with the cancel is committed with it: its state, its mail.
    (done,) = [e for e in hub.of_kind(DispatchProcessed) if e.seq == 2]
    assert done.state == {"seen": ["mail", "cancel"]}
    (sent,) = hub.of_kind(MailSent)
    assert (sent.to, sent.subject) == ("ops@example.org", "cleaned up")


async def test_a_cancel_overtakes_what_a_waiting_run_holds_which_is_then_refused(
    tmp_path: Path,
) -> None:
    dep, calls = recording(tmp_path)
    async with deployed_sidecar(dep, policy=POLICY) as (hub, _):
        await hub.deliver(mail(dep, 1, "wait"))
        await hub.deliver(mail(dep, 2, "held"))
        await wait_for(lambda: status(dep) == [("waiting",)], what="the run waiting")
        await hub.deliver(cancel(dep, 3, "no longer needed"))
        await hub.wait_events(DispatchProcessed, 3)
    assert outcomes(hub) == {1: "processed", 2: "refused_terminal", 3: "processed"}
    steps = sorted(hub.of_kind(DispatchProcessed), key=lambda e: e.step)
    assert [e.seq for e in steps] == [1, 3, 2]
    assert calls.read_text().splitlines() == [
        "mail wait -",
        "cancel no longer needed no longer needed",
    ]
    assert status(dep) == [("cancelled",)]
    assert dep.query("SELECT approvals FROM run WHERE run_id = ?", dep.address) == [(b"[]",)]


async def test_a_terminate_ends_a_suspended_run_unseen_and_refuses_what_it_held(
    tmp_path: Path,
) -> None:
    dep, calls = recording(tmp_path)
    other = new_id("run")
    async with deployed_sidecar(dep, policy=POLICY) as (hub, _):
        await hub.deliver(mail(dep, 1, "poison"))
        await hub.wait_events(RunSuspended, 1)
        await hub.deliver(mail(dep, 2, "held"))
        await hub.deliver(cancel(dep, 3, "stop it", terminate=True))
        await hub.deliver(mail(dep, 4, "elsewhere", run_id=other))
        await hub.wait_events(DispatchProcessed, 4)
    assert outcomes(hub) == {
        1: "refused_terminal",
        2: "refused_terminal",
        3: "processed",
        4: "processed",
    }
    (cancelled,) = hub.of_kind(RunCancelled)
    assert cancelled.reason == "stop it"
    # The handler saw poison twice, never the cancel nor what the run held.
    assert calls.read_text().splitlines() == ["mail poison -"] * 2 + ["mail elsewhere -"]
    assert status(dep) == [("cancelled",)]


async def test_a_handler_failing_on_a_cancel_past_its_budget_still_ends_the_run_cancelled(
    tmp_path: Path,
) -> None:
    dep, calls = recording(tmp_path)
    async with deployed_sidecar(dep, policy=POLICY) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        await hub.deliver(cancel(dep, 2, "boom"))
        await hub.wait_events(RunCancelled, 1)
        await hub.wait_events(DispatchProcessed, 2)
    assert hub.of_kind(RunSuspended) == []
    (done,) = [e for e in hub.of_kind(DispatchProcessed) if e.seq == 2]
    assert (done.outcome, done.error) == ("processed", "RuntimeError: cannot clean up")
    assert calls.read_text().splitlines() == ["mail a -"] + ["cancel boom boom"] * 2
    assert dep.query("SELECT status, error FROM run WHERE run_id = ?", dep.address) == [
        ("cancelled", "RuntimeError: cannot clean up")
    ]
