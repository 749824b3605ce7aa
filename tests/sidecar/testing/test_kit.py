"""The test kit (sidecar.testing): items fed to the sidecar's own runs,
the hub's part played in memory (timers, approvals, schedules, children,
mail), time skipped on the kit's clock, the failure policy applied."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.schedules import InvalidSchedule
from sidecar.testing import (
    ApprovalDecided,
    RunEnded,
    UnknownApproval,
    UnknownRun,
    WorkflowTest,
)

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0


async def timers(ctx: Any, item: Any) -> None:
    """Mail ``set NAME SECONDS`` / ``cancel NAME`` / ``stop``; timers logged."""
    words = item.subject.split()
    if item.kind == "timer":
        ctx.state.setdefault("fired", []).append(
            [item.name, item.payload, item.due_at, item.fired_at, item.message_id, ctx.now]
        )
    elif words[0] == "set":
        ctx.set_timer(words[1], after=float(words[2]), payload=words[1].upper())
    elif words[0] == "at":
        ctx.set_timer(words[1], at=float(words[2]))
    elif words[0] == "cancel":
        ctx.cancel_timer(words[1])
    elif words[0] == "stop":
        ctx.complete(ctx.state.get("fired", []))


async def test_timers_fire_in_due_order_with_the_kit_s_clock() -> None:
    async with WorkflowTest(timers, start=T0) as wf:
        await wf.mail("set b 20")
        await wf.mail("set a 10")
        await wf.mail("set c 30")
        assert [(t.name, t.due_at, t.payload) for t in wf.timers()] == [
            ("a", T0 + 10, "A"),
            ("b", T0 + 20, "B"),
            ("c", T0 + 30, "C"),
        ]
        a = wf.timers()[0]
        await wf.skip(25)
        assert wf.now == T0 + 25
        fired = wf.state["fired"]
        assert [f[:4] for f in fired] == [
            ["a", "A", T0 + 10, T0 + 10],
            ["b", "B", T0 + 20, T0 + 20],
        ]
        assert fired[0][4] == f"timer:{a.timer_id}"
        assert fired[0][5] == T0 + 10  # ctx.now while the fire is processed
        assert [t.name for t in wf.timers()] == ["c"]


async def test_a_timer_set_again_moves_and_a_cancelled_one_never_fires() -> None:
    async with WorkflowTest(timers, start=T0) as wf:
        await wf.mail("set a 10")
        first = wf.timers()[0].timer_id
        await wf.mail("set a 100")
        await wf.mail("set b 50")
        await wf.mail("cancel b")
        await wf.mail("cancel nothing")  # nothing pending by that name: nothing happens
        (moved,) = wf.timers()
        assert (moved.name, moved.due_at) == ("a", T0 + 100)
        assert moved.timer_id != first
        await wf.skip(99)
        assert "fired" not in wf.state
        await wf.skip(1)
        assert [f[0] for f in wf.state["fired"]] == ["a"]


async def test_a_timer_due_in_the_past_fires_at_once_and_run_end_drops_the_rest() -> None:
    async with WorkflowTest(timers, start=T0) as wf:
        await wf.mail(f"at past {T0 - 5}")
        assert [f[:4] for f in wf.state["fired"]] == [["past", None, T0 - 5, T0]]
        await wf.mail("set later 10")
        await wf.mail("stop")
        assert wf.status == "completed"
        assert wf.timers() == []
        await wf.skip(60)
        assert len(wf.result) == 1
        with pytest.raises(RunEnded):
            await wf.mail("more")


async def gate(ctx: Any, item: Any) -> None:
    if item.kind == "approval":
        ctx.complete([item.decision, ctx.now])
    elif item.subject == "ask":
        await ctx.request_approval("ok?", timeout=60)
    elif item.subject == "ask forever":
        await ctx.request_approval("ok?")


async def test_an_approval_times_out_and_a_later_decision_is_refused() -> None:
    async with WorkflowTest(gate, start=T0) as wf:
        await wf.mail("ask")
        (asked,) = wf.approvals()
        assert (asked.prompt, asked.expires_at) == ("ok?", T0 + 60)
        await wf.skip(59)
        assert wf.status == "waiting"
        await wf.skip(1)
        assert (wf.status, wf.result) == ("completed", ["timeout", T0 + 60])
        with pytest.raises(ApprovalDecided) as refused:
            await wf.approve(asked.approval_id)
        assert refused.value.reason == "approval_decided"
        with pytest.raises(UnknownApproval):
            await wf.approve("apr_unknown")


async def test_an_approval_without_timeout_waits_for_ever_then_is_decided() -> None:
    async with WorkflowTest(gate, start=T0) as wf:
        await wf.mail("ask forever")
        await wf.skip(365 * 86400)
        assert wf.status == "waiting"
        await wf.reject()
        assert wf.result == ["reject", T0 + 365 * 86400]


async def test_an_ended_run_s_approval_takes_no_decision_and_never_times_out() -> None:
    async with WorkflowTest(gate, start=T0) as wf:
        await wf.mail("ask")
        await wf.cancel(reason="enough")
        assert wf.status == "cancelled"
        await wf.skip(120)
        (still,) = wf.approvals()
        with pytest.raises(RunEnded):
            await wf.approve(still.approval_id)
        assert wf.approvals() == [still]


async def digest(ctx: Any, item: Any) -> None:
    if item.kind == "schedule":
        ctx.state.setdefault("fires", []).append(
            [item.schedule_id, item.subject, item.payload, item.due_at, item.fired_at]
        )
        ctx.state.setdefault("ids", []).append(item.message_id)


async def test_schedules_fire_at_the_top_level_run_on_the_kit_s_clock() -> None:
    async with WorkflowTest(digest, start=T0) as wf:
        every = wf.schedule(every=60, subject="tick", payload={"n": 1})
        await wf.skip(150)
        fires = wf.state["fires"]
        assert fires == [
            [every, "tick", {"n": 1}, T0 + 60, T0 + 60],
            [every, "tick", {"n": 1}, T0 + 120, T0 + 120],
        ]
        assert wf.state["ids"] == [
            f"schedule:{every}:{T0 + 60!r}",
            f"schedule:{every}:{T0 + 120!r}",
        ]
        wf.unschedule(every)
        await wf.skip(600)
        assert len(wf.state["fires"]) == 2
        with pytest.raises(InvalidSchedule):
            wf.schedule(every=60, cron="* * * * *")
        with pytest.raises(InvalidSchedule):
            wf.schedule(cron="0 8 * * *", tz="Mars/Olympus")


async def test_fires_due_at_one_time_come_in_order_each_processed_before_the_next() -> None:
    async def both(ctx: Any, item: Any) -> None:
        if item.kind == "mail":
            ctx.set_timer("t", after=60)
        else:
            ctx.state.setdefault("seen", []).append([item.kind, ctx.now])
            if item.kind == "timer" and item.name == "t":
                ctx.set_timer("again", after=0)  # due now: before the next fire

    async with WorkflowTest(both, start=T0) as wf:
        await wf.mail("go")
        wf.schedule(every=60)
        await wf.skip(60)
        assert [k for k, _ in wf.state["seen"]] == ["timer", "timer", "schedule"]


async def parent(ctx: Any, item: Any) -> None:
    if item.kind == "mail":
        ctx.state["child"] = await ctx.spawn(item.subject, {"n": 2})
    elif item.kind == "child":
        ctx.complete([item.status, item.result, item.error])


async def double(ctx: Any, item: Any) -> None:
    if item.kind == "start":
        ctx.state["input"] = item.input
    elif item.kind == "signal":
        ctx.complete(ctx.state["input"]["n"] * item.payload)


async def test_a_child_from_the_handler_s_module_runs_and_reports_to_its_parent() -> None:
    async with WorkflowTest(parent) as wf:
        await wf.mail("flow:double")
        child = wf.run(wf.state["child"])
        assert (child.status, child.parent, child.entrypoint) == (
            "running",
            wf.run().run_id,
            "flow:double",
        )
        await wf.signal("times", 21, run=child.run_id)
        assert wf.run(child.run_id).result == 42
        assert wf.result == ["completed", 42, None]


async def test_a_child_given_by_mapping_and_one_that_cannot_be_found() -> None:
    async def triple(ctx: Any, item: Any) -> None:
        ctx.complete(item.input["n"] * 3)

    async with WorkflowTest(parent, {"other:triple": triple}) as wf:
        await wf.mail("other:triple")
        assert wf.result == ["completed", 6, None]
    async with WorkflowTest(parent, {}) as wf:
        await wf.mail("flow:missing")
        # No retry can find it: the policy (suspend) applies at once, as in a sidecar.
        child = wf.run(wf.state["child"])
        assert child.status == "suspended"
        assert "EntrypointError" in (child.error or "") and "flow:missing" in (child.error or "")
        assert wf.status == "running"


async def buggy(ctx: Any, item: Any) -> None:
    ctx.state.setdefault("seen", []).append(item.subject)
    if item.subject == "poison" and not FIXED:
        raise ValueError("poisoned")


FIXED = False


async def test_a_handler_bug_suspends_the_run_until_it_is_resumed() -> None:
    global FIXED
    FIXED = False
    async with WorkflowTest(buggy, max_attempts=3) as wf:
        await wf.mail("a")
        poison = await wf.mail("poison")
        await wf.mail("b")
        run = wf.run()
        assert (run.status, run.suspended_on) == ("suspended", poison.dispatch_id)
        assert run.error == "ValueError: poisoned"
        assert wf.state["seen"] == ["a"]
        FIXED = True
        await wf.resume()
        assert (wf.status, wf.state["seen"]) == ("running", ["a", "poison", "b"])
        assert wf.run().suspended_on is None


async def test_on_failure_fail_ends_the_run() -> None:
    async with WorkflowTest(buggy, on_failure="fail", max_attempts=2) as wf:
        global FIXED
        FIXED = False
        await wf.mail("poison")
        assert (wf.status, wf.error) == ("failed", "ValueError: poisoned")


async def mailer(ctx: Any, item: Any) -> None:
    ctx.state.setdefault("got", []).append([item.sender, item.subject])
    if item.subject == "loop":
        ctx.send("Flow@mailrun.local", "to myself")
        ctx.send("out@example.org", "away", "body")


async def test_mail_to_the_deployment_s_address_comes_back_as_mail() -> None:
    async with WorkflowTest(mailer) as wf:
        await wf.mail("loop", sender="ann@example.org")
        assert wf.state["got"] == [["ann@example.org", "loop"], ["flow@mailrun.local", "to myself"]]
        inner, away = wf.sent
        assert inner.internal and not away.internal
        assert away.headers == {
            "From": "flow@mailrun.local",
            "To": "out@example.org",
            "Subject": "away",
            "Message-ID": away.headers["Message-ID"],
        }
        assert away.message_id.endswith(":mail:2")


async def test_reading_before_anything_ran() -> None:
    async with WorkflowTest(mailer) as wf:
        with pytest.raises(UnknownRun):
            wf.run()
        assert wf.sent == [] and wf.timers() == [] and wf.approvals() == []
    with pytest.raises(RuntimeError):
        await wf.mail("outside")


async def test_a_cancel_ends_the_run_and_its_timers() -> None:
    async with WorkflowTest(timers, start=T0) as wf:
        await wf.mail("set a 10")
        await wf.cancel(reason="enough")
        assert (wf.status, wf.timers()) == ("cancelled", [])


async def test_from_sources_loads_the_files_as_a_deployment_does() -> None:
    files = {
        "flow.py": "from .helpers import shout\n\n\nasync def main(ctx, item):\n"
        "    ctx.complete(shout(item.subject))\n",
        "helpers.py": "def shout(text):\n    return text.upper()\n",
    }
    async with WorkflowTest.from_sources(files, "flow:main") as wf:
        await wf.mail("hey")
        assert wf.result == "HEY"


async def stepper(ctx: Any, item: Any) -> None:
    RAN.append(item.dispatch_id)

    def call() -> int:
        CALLS.append(item.dispatch_id)
        return len(CALLS)

    ctx.state["got"] = await ctx.step("call", call)
    if item.subject == "fail once" and RAN.count(item.dispatch_id) == 1:
        raise RuntimeError("after the step")


CALLS: list[str] = []
RAN: list[str] = []


async def test_steps_are_recorded_per_item_and_not_called_again() -> None:
    CALLS.clear()
    RAN.clear()
    async with WorkflowTest(stepper) as wf:
        sent = await wf.mail("fail once")
        assert [sent.dispatch_id] * 2 == RAN  # the handler ran twice
        assert [sent.dispatch_id] == CALLS  # the step once
        assert wf.state["got"] == 1
        (step,) = wf.run().steps_of(sent.dispatch_id)
        assert (step.name, step.result, step.error, step.attempts) == ("call", 1, None, 1)


async def test_an_injected_step_failure_is_retried_without_waiting() -> None:
    CALLS.clear()
    RAN.clear()
    async with WorkflowTest(stepper, max_attempts=1, on_failure="fail") as wf:
        wf.fail_step("call", ConnectionError("down"), times=2)
        sent = await wf.mail("x")
        (step,) = wf.run().steps_of(sent.dispatch_id)
        assert (step.result, step.attempts) == (1, 3)
        assert len(wf.waits) == 2
        wf.fail_step("call", ConnectionError("down"))
        later = await wf.mail("y")
        (failed,) = wf.run().steps_of(later.dispatch_id)
        assert failed.error == "ConnectionError: down"
        assert wf.status == "failed"
