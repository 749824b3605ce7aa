"""docs/recipes.md and the demo's example, tested with the test kit: each
recipe block loaded as a deployment gives it, driven to the outcome its
page promises, days skipped on the kit's clock."""

from __future__ import annotations

import datetime
from zoneinfo import ZoneInfo

import pytest

from hub._examples.counter import main as counter
from sidecar.testing import ApprovalDecided, WorkflowTest
from tests.e2e.mail.test_recipes import recipes

from .tickets import ticket_server

pytestmark = pytest.mark.anyio

DAY = 86400.0
PARIS = ZoneInfo("Europe/Paris")


def recipe(block: str, *, append: str = "", **options: object) -> WorkflowTest:
    source = recipes()[block] + append
    return WorkflowTest.from_sources({"flow.py": source}, "flow:main", **options)  # type: ignore[arg-type]


def paris(*args: int) -> float:
    return datetime.datetime(*args, tzinfo=PARIS).timestamp()


async def test_the_counter_example_counts_until_stop() -> None:
    async with WorkflowTest(counter) as wf:
        for subject in ("one", "two"):
            await wf.mail(subject)
        assert (wf.status, wf.state["count"]) == ("running", 2)
        await wf.mail("stop")
        assert wf.status == "completed"
        assert wf.result == {"count": 3, "subjects": ["one", "two", "stop"]}


async def test_fan_out_sums_what_every_child_reports() -> None:
    async with recipe("fan-out") as wf:
        await wf.mail("count", "alpha be gamma")
        assert (wf.status, wf.result) == ("completed", {"total": 12})
        children = [wf.run(c) for c in wf.run().children]
        assert [(c.status, c.result, c.entrypoint) for c in children] == [
            ("completed", 5, "flow:count"),
            ("completed", 2, "flow:count"),
            ("completed", 5, "flow:count"),
        ]


async def test_the_approval_gate_holds_mail_until_the_decision() -> None:
    async with recipe("approval") as wf:
        await wf.mail("order-7")
        assert wf.status == "waiting"
        (asked,) = wf.approvals()
        assert asked.prompt == "ship order-7?"
        for subject in ("later 1", "later 2"):
            await wf.mail(subject)
        assert wf.status == "waiting"
        await wf.approve()
        assert (wf.status, wf.result) == ("completed", ["later 1", "later 2"])
        assert wf.state["decision"] == "approve"
        with pytest.raises(ApprovalDecided):
            await wf.reject(asked.approval_id)


async def test_signals_drive_the_state_machine_and_a_retried_one_counts_once() -> None:
    async with recipe("signals") as wf:
        await wf.mail("hello")
        await wf.signal("start")
        first = await wf.signal("pause", {"why": "lunch"}, message_id="p-1")
        again = await wf.signal("pause", {"why": "lunch"}, message_id="p-1")
        assert again.duplicate and again.dispatch_id == first.dispatch_id
        for name in ("bogus", "resume", "finish"):
            await wf.signal(name)
        assert wf.result == [
            ["start", None],
            ["pause", {"why": "lunch"}],
            ["resume", None],
            ["finish", None],
        ]
        assert wf.state["ignored"] == ["bogus"]


async def test_a_reply_goes_to_the_sender_with_the_hub_s_headers() -> None:
    async with recipe("reply", name="support") as wf:
        await wf.mail("hi", "there", sender="alice@example.org")
        (reply,) = wf.sent
        assert (reply.to, reply.subject, reply.text) == (
            "alice@example.org",
            "Re: hi",
            "Got it: there",
        )
        assert reply.headers["From"] == "support@mailrun.local"
        assert reply.headers["To"] == "alice@example.org"
        assert reply.headers["Message-ID"].endswith("@mailrun.local>")
        assert not reply.internal


async def test_a_child_asks_by_mail_and_the_parent_gets_the_answer() -> None:
    async with recipe("ask", name="shipping") as wf:
        await wf.mail("order-7", sender="boss@example.org")
        (child,) = wf.run().children
        (question,) = wf.sent
        assert (question.to, question.subject) == ("boss@example.org", "Ship order-7?")
        assert wf.status == "running" and wf.run(child).status == "running"
        # The hub routes the reply to the child that asked.
        await wf.mail("Re: Ship order-7?", "yes\n\n> Reply yes or no.\n", run=child)
        assert (wf.run(child).status, wf.run(child).result) == ("completed", "yes")
        assert (wf.status, wf.result) == ("completed", {"answer": "yes"})


async def test_remind_only_the_request_nobody_answered_after_three_days() -> None:
    async with recipe("remind") as wf:
        await wf.mail("invoice 12", sender="ann@example.org")
        await wf.mail("invoice 13", sender="bob@example.org")
        assert [t.name for t in wf.timers()] == ["remind:invoice 12", "remind:invoice 13"]
        await wf.mail("Re: invoice 12", sender="carol@example.org")
        (left,) = wf.timers()
        assert (left.name, left.payload) == ("remind:invoice 13", "invoice 13")
        await wf.skip(3 * DAY - 1)
        assert wf.sent == []
        await wf.skip(1)
        (reminder,) = wf.sent
        assert (reminder.to, reminder.subject) == ("bob@example.org", "Reminder: invoice 13")
        assert wf.state["answered"] == ["invoice 12"]
        assert wf.state["reminded"] == ["invoice 13"]
        assert wf.timers() == []


async def test_escalate_when_nobody_approved_by_friday() -> None:
    wednesday = paris(2026, 12, 2, 10, 0)
    async with recipe("escalate", start=wednesday) as wf:
        await wf.mail("laptop for Ann")
        (asked,) = wf.approvals()
        assert asked.expires_at == paris(2026, 12, 4, 17, 0)
        await wf.skip(asked.expires_at - wf.now - 1)
        assert (wf.status, wf.sent) == ("waiting", [])
        await wf.skip(1)
        assert (wf.status, wf.result) == ("completed", "timeout")
        (escalation,) = wf.sent
        assert (escalation.to, escalation.subject) == (
            "boss@example.org",
            "Escalation: laptop for Ann",
        )
        with pytest.raises(ApprovalDecided):
            await wf.approve(asked.approval_id)


async def test_an_approval_in_time_is_not_escalated() -> None:
    friday_evening = paris(2026, 12, 4, 18, 0)  # past the deadline: the next Friday's
    async with recipe("escalate", start=friday_evening) as wf:
        await wf.mail("laptop for Ann")
        (asked,) = wf.approvals()
        assert asked.expires_at == paris(2026, 12, 11, 17, 0)
        await wf.skip(2 * DAY)
        await wf.approve()
        await wf.skip(30 * DAY)
        assert (wf.status, wf.result, wf.sent) == ("completed", "approve", [])


async def test_the_digest_goes_out_every_morning_at_eight_paris_time() -> None:
    async with recipe("digest", start=paris(2026, 12, 1, 7, 0)) as wf:
        await wf.mail("first", sender="ann@example.org")
        wf.schedule(cron="0 8 * * *", tz="Europe/Paris", payload={"to": "team@example.org"})
        await wf.mail("second", sender="bob@example.org")
        await wf.skip(3599)
        assert wf.sent == []
        await wf.skip(1)
        (digest,) = wf.sent
        assert (digest.to, digest.subject) == ("team@example.org", "Digest: 2 mail(s)")
        assert digest.text == "ann@example.org: first\nbob@example.org: second"
        await wf.skip(DAY)
        assert [(m.subject, m.text) for m in wf.sent[1:]] == [
            ("Digest: 0 mail(s)", "Nothing arrived.")
        ]
        assert wf.now == paris(2026, 12, 2, 8, 0)


async def test_a_ticket_is_created_once_though_the_item_is_processed_again() -> None:
    # The handler fails once after its step: the item is processed again,
    # and the step returns the ticket it recorded instead of calling again.
    flaky = (
        "\n_main = main\n_failed = []\n\n\nasync def main(ctx, item):\n"
        "    await _main(ctx, item)\n    if not _failed:\n"
        "        _failed.append(item.dispatch_id)\n        raise RuntimeError('after the step')\n"
    )
    with ticket_server() as tickets:
        async with recipe("ticket", append=f"\nTICKETS = {tickets.url!r}\n{flaky}") as wf:
            tickets.failures = 2  # the API fails twice: the step's retries get through
            sent = await wf.mail("printer on fire", sender="ann@example.org")
            assert wf.status == "running"
            assert [t["title"] for t in tickets.created] == ["printer on fire"]
            assert tickets.requests == 3
            (step,) = wf.run().steps_of(sent.dispatch_id)
            assert (step.name, step.result, step.error, step.attempts) == (
                "create-ticket",
                "T-1",
                None,
                3,
            )
            assert len(wf.waits) == 2  # the backoffs, returned at once
            (reply,) = wf.sent
            assert reply.subject == "[T-1] printer on fire"
            assert wf.state["tickets"] == {"printer on fire": "T-1"}


async def test_a_ticket_step_that_keeps_failing_fails_the_item() -> None:
    with ticket_server() as tickets:
        async with recipe("ticket", append=f"\nTICKETS = {tickets.url!r}\n", max_attempts=2) as wf:
            wf.fail_step("create-ticket", ConnectionError("the ticket system is down"))
            await wf.mail("printer on fire")
            assert wf.status == "suspended"
            assert "StepFailed" in (wf.error or "")
            assert tickets.requests == 0 and wf.sent == []
