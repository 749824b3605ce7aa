"""Approval gates in the sidecar: a waiting run holds what arrives; the
decision overtakes it; the held items follow in their order, before anything
later; the gate survives a restart and a takeover."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from runtime import ApprovalRequested, DispatchProcessed, MailInbound, RunSnapshot
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    Deployment,
    FakeHub,
    deployed_sidecar,
    mail,
    make_deployment,
)

pytestmark = pytest.mark.anyio

GATED = """
async def main(ctx, item):
    ctx.state.setdefault("seen", []).append(item.subject)
    if item.subject == "gate":
        ctx.state["approval"] = await ctx.request_approval("ship it?")
"""


def decision(dep: Deployment, seq: int, approval_id: str, run_id: str | None = None) -> MailInbound:
    body = msgspec.json.encode({"approval_id": approval_id, "decision": "approve"})
    return mail(dep, seq, "approve", body, kind="approval", run_id=run_id)


def processed_in_order(hub: FakeHub) -> list[str]:
    """The subjects the handler saw, by the run's step (also the order they came in)."""
    done: list[DispatchProcessed] = hub.of_kind(DispatchProcessed)
    assert [e.step for e in done] == list(range(1, len(done) + 1))
    return list(done[-1].state["seen"]) if done else []


def held(dep: Deployment) -> list[int]:
    return [seq for (seq,) in dep.query("SELECT seq FROM inbox WHERE state = 'held' ORDER BY seq")]


async def test_a_waiting_run_holds_items_and_the_decision_overtakes_them(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, source=GATED)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "gate"))
        await hub.wait_events(DispatchProcessed, 1)
        (asked,) = hub.of_kind(ApprovalRequested)
        for seq, subject in ((2, "a"), (3, "b")):
            await hub.deliver(mail(dep, seq, subject))
        await wait_for(lambda: held(dep) == [2, 3], what="both mails held")
        assert len(hub.of_kind(DispatchProcessed)) == 1
        await hub.deliver(decision(dep, 4, asked.approval_id))
        await hub.deliver(mail(dep, 5, "c"))
        await hub.wait_events(DispatchProcessed, 5)
    assert processed_in_order(hub) == ["gate", "approve", "a", "b", "c"]
    assert held(dep) == []


async def test_a_second_request_while_the_gate_is_open_holds_again(tmp_path: Path) -> None:
    source = GATED + "    if item.subject == 'a':\n        await ctx.request_approval('again?')\n"
    dep = make_deployment(tmp_path, source=source)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "gate"))
        await hub.wait_events(ApprovalRequested, 1)
        for seq, subject in ((2, "a"), (3, "b")):
            await hub.deliver(mail(dep, seq, subject))
        await wait_for(lambda: held(dep) == [2, 3], what="both mails held")
        await hub.deliver(decision(dep, 4, hub.of_kind(ApprovalRequested)[0].approval_id))
        # "a" asks again: "b" stays held, now behind the second gate.
        await hub.wait_events(ApprovalRequested, 2)
        await wait_for(lambda: held(dep) == [3], what="b held again")
        await hub.deliver(decision(dep, 5, hub.of_kind(ApprovalRequested)[1].approval_id))
        await hub.wait_events(DispatchProcessed, 5)
    assert processed_in_order(hub) == ["gate", "approve", "a", "approve", "b"]


async def test_the_gate_and_what_it_holds_survive_a_restart(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, source=GATED)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "gate"))
        await hub.wait_events(ApprovalRequested, 1)
        (asked,) = hub.of_kind(ApprovalRequested)
        await hub.deliver(mail(dep, 2, "a"))
        await wait_for(lambda: held(dep) == [2], what="the mail held")
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(decision(dep, 3, asked.approval_id))
        await hub.wait_events(DispatchProcessed, 2)
    done = hub.of_kind(DispatchProcessed)
    assert [e.step for e in done] == [2, 3]
    assert done[-1].state["seen"] == ["gate", "approve", "a"]


async def test_a_new_owner_rebuilds_the_gate_from_the_hubs_state(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, source=GATED)
    run_id = "run_" + "1" * 26
    waiting = RunSnapshot(
        run_id=run_id,
        status="waiting",
        state={"seen": ["gate"]},
        last_seq=1,
        last_step=1,
        approvals=["apr_" + "2" * 26],
    )
    async with deployed_sidecar(dep, from_hub=1, states=[waiting], floor_seq=1) as (hub, _):
        await hub.deliver(mail(dep, 2, "a", run_id=run_id))
        await wait_for(lambda: held(dep) == [2], what="the mail held")
        await hub.deliver(decision(dep, 3, waiting.approvals[0], run_id))
        await hub.wait_events(DispatchProcessed, 2)
    assert [e.step for e in hub.of_kind(DispatchProcessed)] == [2, 3]
    assert hub.of_kind(DispatchProcessed)[-1].state["seen"] == ["gate", "approve", "a"]


async def test_a_new_owner_skips_the_seqs_the_hub_settled_past_a_held_one(tmp_path: Path) -> None:
    # The old owner processed the decision (seq 3) and died before the mail
    # its gate held (seq 2): the hub settled 3 but not 2, and never sends 3 again.
    dep = make_deployment(tmp_path, source=GATED)
    run_id = "run_" + "1" * 26
    resumed = RunSnapshot(
        run_id=run_id,
        status="running",
        state={"seen": ["gate", "approve"]},
        last_seq=3,
        last_step=2,
    )
    async with deployed_sidecar(dep, from_hub=1, states=[resumed], floor_seq=1, settled=[3]) as (
        hub,
        _,
    ):
        await hub.deliver(mail(dep, 2, "a", run_id=run_id))
        await hub.deliver(mail(dep, 4, "b", run_id=run_id))
        await hub.wait_events(DispatchProcessed, 2)
    assert [e.step for e in hub.of_kind(DispatchProcessed)] == [3, 4]
    assert hub.of_kind(DispatchProcessed)[-1].state["seen"] == ["gate", "approve", "a", "b"]
