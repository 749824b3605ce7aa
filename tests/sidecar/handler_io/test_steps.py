"""``ctx.step`` in a running sidecar: a step's outcome is recorded before the
handler goes on, so the handler's own retries, a parked item's retry and a
resume call again only the steps that failed; the rows go once the item is
consumed, and a duplicate name fails the item with nothing of it committed."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from runtime import DispatchProcessed, MailSent
from runtime.wire import OnFailure, RunSuspended, StepRecorded
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    Deployment,
    FakeHub,
    deployed_sidecar,
    mail,
    make_deployment,
)

from ..execution.test_policies import outcomes, policy, resume

pytestmark = pytest.mark.anyio


def workflow(tmp_path: Path, body: str) -> tuple[Deployment, Path]:
    """A deployment whose handler runs ``body``; ``calls`` (a directory) gets
    a line in the file of each step's name every time its function is called."""
    calls = tmp_path / "calls"
    calls.mkdir()
    source = f"""
import os

from sidecar import StepRetry

CALLS = {str(calls)!r}
FIXED = {str(tmp_path / "fixed")!r}


def call(name, value=None, fail=False):
    with open(os.path.join(CALLS, name), "a") as f:
        f.write("called\\n")
    if fail and not os.path.exists(FIXED):
        raise ConnectionError(name + " is down")
    return value


def handler_calls():
    path = os.path.join(CALLS, "handler")
    with open(path, "a") as f:
        f.write("called\\n")
    with open(path) as f:
        return len(f.read().split())


async def main(ctx, item):
{body}
"""
    return make_deployment(tmp_path / "state", source=source), calls


def called(calls: Path, name: str) -> int:
    path = calls / name
    return len(path.read_text().split()) if path.exists() else 0


def step_rows(dep: Deployment) -> list[tuple[str, str | None]]:
    return dep.query("SELECT name, error FROM step ORDER BY name")


def recorded(hub: FakeHub) -> list[tuple[str, str | None, int]]:
    steps = sorted(hub.of_kind(StepRecorded), key=lambda s: s.at)
    return [(s.name, s.error, s.attempts) for s in steps]


async def test_a_step_that_succeeded_is_not_called_again_by_the_handlers_retries(
    tmp_path: Path,
) -> None:
    dep, calls = workflow(
        tmp_path,
        """
    ctx.state["charged"] = await ctx.step("charge", call, "charge", {"receipt": 7})
    if handler_calls() < 3:
        raise RuntimeError("the handler fails after its step")
""",
    )
    async with deployed_sidecar(dep, policy=policy(OnFailure.PARK, max_attempts=5)) as (hub, _):
        await hub.deliver(mail(dep, 1, "order"))
        await wait_for(lambda: outcomes(hub) == {1: "processed"}, what="the item processed")
        await wait_for(lambda: step_rows(dep) == [], what="its step rows gone with it")
    (done,) = hub.of_kind(DispatchProcessed)
    assert done.state == {"charged": {"receipt": 7}}
    assert (called(calls, "handler"), called(calls, "charge")) == (3, 1)
    assert recorded(hub) == [("charge", None, 1)]


async def test_a_step_that_failed_for_good_is_not_called_again_by_the_handlers_retries(
    tmp_path: Path,
) -> None:
    dep, calls = workflow(
        tmp_path,
        """
    handler_calls()
    retry = StepRetry(attempts=2, backoff=0)
    await ctx.step("notify", call, "notify", fail=True, retry=retry)
""",
    )
    async with deployed_sidecar(dep, policy=policy(OnFailure.PARK, max_attempts=3)) as (hub, _):
        await hub.deliver(mail(dep, 1, "order"))
        await wait_for(lambda: outcomes(hub) == {1: "parked"}, what="the item parked")
    (parked,) = hub.of_kind(DispatchProcessed)
    failed = "StepFailed: step 'notify' failed after 2 attempt(s): ConnectionError: notify is down"
    assert parked.error == failed
    # The step's own two attempts, in the handler's first call; the two
    # retries of the handler got the recorded failure.
    assert (called(calls, "handler"), called(calls, "notify")) == (3, 2)
    assert recorded(hub) == [("notify", "ConnectionError: notify is down", 2)]


async def test_a_parked_item_keeps_its_successful_steps_for_its_retry_and_drops_its_failed_ones(
    tmp_path: Path,
) -> None:
    dep, calls = workflow(
        tmp_path,
        """
    ctx.state["ok"] = await ctx.step("ok", call, "ok", 1)
    ctx.state["flaky"] = await ctx.step("flaky", call, "flaky", 2, fail=True,
                                        retry=StepRetry(attempts=1))
""",
    )
    async with deployed_sidecar(dep, policy=policy(OnFailure.PARK, max_attempts=1)) as (hub, _):
        poison = mail(dep, 1, "order")
        await hub.deliver(poison)
        await wait_for(lambda: outcomes(hub) == {1: "parked"}, what="the item parked")
        assert step_rows(dep) == [("ok", None)]
        (tmp_path / "fixed").touch()
        await hub.deliver(msgspec.structs.replace(poison, seq=2))  # the hub's retry
        await wait_for(lambda: outcomes(hub).get(2) == "processed", what="the retry processed")
        await wait_for(lambda: step_rows(dep) == [], what="its step rows gone with it")
    done = [e for e in hub.of_kind(DispatchProcessed) if e.outcome == "processed"]
    assert done[0].state == {"ok": 1, "flaky": 2}
    assert (called(calls, "ok"), called(calls, "flaky")) == (1, 2)


async def test_a_resume_calls_the_failed_step_again_and_not_the_successful_one(
    tmp_path: Path,
) -> None:
    dep, calls = workflow(
        tmp_path,
        """
    if item.kind == "mail":
        ctx.state["ok"] = await ctx.step("ok", call, "ok", 1)
        ctx.state["flaky"] = await ctx.step("flaky", call, "flaky", 2, fail=True,
                                            retry=StepRetry(attempts=1))
""",
    )
    async with deployed_sidecar(dep, policy=policy(OnFailure.SUSPEND, max_attempts=2)) as (
        hub,
        _,
    ):
        await hub.deliver(mail(dep, 1, "order"))
        await hub.wait_events(RunSuspended, 1)
        # Held, not consumed: both records stay while the run is suspended.
        assert step_rows(dep) == [("flaky", "ConnectionError: flaky is down"), ("ok", None)]
        assert called(calls, "flaky") == 1
        (tmp_path / "fixed").touch()
        await hub.deliver(resume(dep, 2))
        await wait_for(lambda: outcomes(hub) == {1: "processed", 2: "processed"}, what="resumed")
        await wait_for(lambda: step_rows(dep) == [], what="the step rows gone")
    done = [e for e in hub.of_kind(DispatchProcessed) if e.seq == 1]
    assert done[0].state == {"ok": 1, "flaky": 2}
    assert (called(calls, "ok"), called(calls, "flaky")) == (1, 2)


async def test_a_duplicate_step_name_fails_the_item_and_commits_none_of_its_effects(
    tmp_path: Path,
) -> None:
    dep, calls = workflow(
        tmp_path,
        """
    ctx.send(to="someone@example.org", subject="before the steps", body="hello")
    ctx.state["a"] = await ctx.step("a", call, "a", 1)
    ctx.state["again"] = await ctx.step("a", call, "a", 2)
""",
    )
    async with deployed_sidecar(dep, policy=policy(OnFailure.PARK, max_attempts=2)) as (hub, _):
        await hub.deliver(mail(dep, 1, "order"))
        await wait_for(lambda: outcomes(hub) == {1: "parked"}, what="the item parked")
    (parked,) = hub.of_kind(DispatchProcessed)
    assert parked.error.startswith("DuplicateStep: step 'a' was taken already")
    assert parked.state == {}
    assert hub.of_kind(MailSent) == []
    assert called(calls, "a") == 1  # its second attempt got the first one's record
