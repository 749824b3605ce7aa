"""Child runs in the sidecar: each runs its entrypoint as its own run; a
parent that ends cancels its live children; a child whose entrypoint is
missing fails at once."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from runtime import DispatchProcessed, RunCancelled, RunCompleted, RunFailed, RunStarted
from tests.support.harnesses.sidecar import Deployment, deployed_sidecar, mail, make_deployment

pytestmark = pytest.mark.anyio

PARENT = "run_" + "a" * 26
CHILD = "run_" + "b" * 26

FLOW = """
async def main(ctx, item):
    ctx.state.setdefault("seen", []).append(item.kind)
    if item.subject == "stop":
        ctx.complete("done")


async def child(ctx, item):
    ctx.state.setdefault("child_saw", []).append([item.kind, getattr(item, "input", None)])
"""


def start(dep: Deployment, seq: int, entrypoint: str = "flow:child") -> object:
    return mail(
        dep,
        seq,
        entrypoint,
        msgspec.json.encode({"n": 7}),
        kind="start",
        run_id=CHILD,
        sender=PARENT,
    )


async def test_a_child_runs_its_entrypoint_and_is_cancelled_when_its_parent_ends(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path, source=FLOW)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "hello", run_id=PARENT))
        await hub.deliver(start(dep, 2))
        await hub.wait_events(DispatchProcessed, 2)
        child_done = [e for e in hub.of_kind(DispatchProcessed) if e.run_id == CHILD]
        assert child_done[0].state == {"child_saw": [["start", {"n": 7}]]}
        await hub.deliver(mail(dep, 3, "stop", run_id=PARENT))
        await hub.deliver(mail(dep, 4, "late", kind="signal", run_id=CHILD))
        await hub.wait_events(DispatchProcessed, 4)
        (cancelled,) = hub.of_kind(RunCancelled)
        assert (cancelled.run_id, cancelled.reason) == (CHILD, "parent run ended")
        (completed,) = hub.of_kind(RunCompleted)
        assert completed.run_id == PARENT
        late = hub.of_kind(DispatchProcessed)[-1]
        assert (late.run_id, late.outcome) == (CHILD, "refused_terminal")
    assert dep.query(
        "SELECT status, parent_run_id, entrypoint FROM run WHERE run_id = ?", CHILD
    ) == [("cancelled", PARENT, "flow:child")]


async def test_a_child_started_after_its_parent_ended_never_runs(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, source=FLOW)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "stop", run_id=PARENT))
        await hub.deliver(start(dep, 2))
        await hub.wait_events(DispatchProcessed, 2)
        (cancelled,) = hub.of_kind(RunCancelled)
        assert cancelled.run_id == CHILD
        assert [e.run_id for e in hub.of_kind(RunStarted)] == [PARENT]
        refused = hub.of_kind(DispatchProcessed)[-1]
        assert (refused.run_id, refused.outcome, refused.state) == (CHILD, "refused_terminal", {})


async def test_a_child_whose_entrypoint_is_missing_fails_at_once(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, source=FLOW)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "hello", run_id=PARENT))
        await hub.deliver(start(dep, 2, entrypoint="flow:nowhere"))
        await hub.wait_events(RunFailed, 1)
    (failed,) = hub.of_kind(RunFailed)
    assert failed.run_id == CHILD
    assert "EntrypointError" in failed.error and "nowhere" in failed.error
