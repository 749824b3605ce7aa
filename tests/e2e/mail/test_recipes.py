"""docs/recipes.md, run: each recipe block is deployed to a real ``mailrun up``
(with a real SMTP server as its relay) and driven to the outcome the page
promises. Where a recipe waits days, the test appends a shorter definition
of its delay to the source it deploys, as the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.sidecar.testing.tickets import ticket_server
from tests.support import wait_for
from tests.support.servers.smtp import SmtpServer

from ..harness import Up, mailrun, mailrun_up

pytestmark = pytest.mark.anyio

PAGE = Path(__file__).parents[3] / "docs" / "recipes.md"
_BLOCK = re.compile(r"<!-- recipe: ([\w-]+) -->\n```python\n(.*?)```", re.S)


def recipes() -> dict[str, str]:
    return dict(_BLOCK.findall(PAGE.read_text(encoding="utf-8")))


FIRST = ("approval", "fan-out", "reply", "signals")


def test_the_page_has_the_nine_recipes() -> None:
    # "ask" is driven by tests/e2e/outbound/test_replies.py, with real SMTP both ways.
    assert sorted(recipes()) == [
        "approval",
        "ask",
        "digest",
        "escalate",
        "fan-out",
        "newsletter",
        "remind",
        "reply",
        "signals",
        "ticket",
    ]


async def _mail(up: Up, to: str, subject: str, body: str = "", **extra: Any) -> str:
    r = await up.send(to, subject, body, **extra)
    assert r.status_code == 202, r.text
    return str(r.json()["run_id"])


async def _signal(up: Up, run_id: str, name: str, **extra: Any) -> None:
    r = await up.http.post(f"/runs/{run_id}/signals", json={"name": name, **extra})
    assert r.status_code == 202, r.text


async def test_every_recipe_does_what_the_page_says(tmp_path: Path, smtp: SmtpServer) -> None:
    found = {name: source for name, source in recipes().items() if name in FIRST}
    fast = {"MAILRUN_BACKOFF_MAX": "0.2"}
    async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=fast) as up:
        deps = {name: await up.deploy(name, source) for name, source in found.items()}

        # Fan-out and fan-in: one child per word, the lengths summed.
        fan = await _mail(up, deps["fan-out"]["address"], "count", "alpha be gamma")
        run = await up.wait_state(fan, lambda r: r["status"] == "completed")
        assert run["result"] == {"total": 12}
        children = up.query("SELECT status FROM workflow_run WHERE parent_run_id = ?", fan)
        assert children == [("completed",)] * 3

        # An approval gate: two mails held while waiting, then the decision.
        gated = deps["approval"]["address"]
        order = await _mail(up, gated, "order-7")
        run = await up.wait_state(order, lambda r: r["status"] == "waiting")
        for subject in ("later 1", "later 2"):
            await _mail(up, gated, subject)
        r = await up.http.post(
            f"/approvals/{run['state']['approval']}", json={"decision": "approve"}
        )
        assert r.status_code == 202, r.text
        run = await up.wait_state(order, lambda r: r["status"] == "completed")
        assert run["result"] == ["later 1", "later 2"]
        assert run["state"]["decision"] == "approve"

        # Signals drive a state machine; a retried signal counts once.
        machine = await _mail(up, deps["signals"]["address"], "hello")
        await _signal(up, machine, "start")
        for _ in range(2):
            await _signal(up, machine, "pause", payload={"why": "lunch"}, message_id="p-1")
        await _signal(up, machine, "bogus")
        await _signal(up, machine, "resume")
        await _signal(up, machine, "finish")
        run = await up.wait_state(machine, lambda r: r["status"] == "completed")
        assert run["result"] == [
            ["start", None],
            ["pause", {"why": "lunch"}],
            ["resume", None],
            ["finish", None],
        ]
        assert run["state"]["ignored"] == ["bogus"]

        # A reply leaves through the relay, once.
        await _mail(up, deps["reply"]["address"], "hi", "there", **{"from": "alice@example.org"})

        def replied() -> bool:
            return len(smtp.recorder.received) >= 1

        await wait_for(replied, timeout=30, what="the reply at the relay")
        (reply,) = smtp.recorder.received
        assert reply.rcpt_tos == ["alice@example.org"]
        assert reply.message["Subject"] == "Re: hi"
        assert reply.message.get_content().strip() == "Got it: there"


async def test_remind_and_escalate_fire_on_the_hub_s_timers(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    found = recipes()
    fast = {"MAILRUN_BACKOFF_MAX": "0.2"}
    async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=fast) as up:
        remind = await up.deploy("remind", found["remind"] + "\nREMIND_AFTER = 2\n")
        escalate = await up.deploy(
            "escalate", found["escalate"] + "\n\ndef deadline(now):\n    return now + 1\n"
        )

        # Two requests, one answered: only the other is reminded, once.
        asked = await _mail(up, remind["address"], "invoice 12", **{"from": "ann@example.org"})
        await _mail(up, remind["address"], "invoice 13", **{"from": "bob@example.org"})
        await _mail(up, remind["address"], "Re: invoice 12", **{"from": "carol@example.org"})
        run = await up.wait_state(asked, lambda r: r["state"].get("reminded"), timeout=30)
        assert run["state"]["reminded"] == ["invoice 13"]
        assert run["state"]["answered"] == ["invoice 12"]
        assert run["state"]["open"] == {}

        # Nobody decides: the hub times the approval out, the run escalates.
        waiting = await _mail(up, escalate["address"], "laptop for Ann")
        run = await up.wait_state(waiting, lambda r: r["status"] == "completed", timeout=30)
        assert run["result"] == "timeout"
        late = await up.http.post(
            f"/approvals/{run['state']['approval']}", json={"decision": "approve"}
        )
        assert late.status_code == 409, late.text
        assert late.json()["reason"] == "approval_decided"

        def relayed() -> bool:
            return len(smtp.recorder.received) >= 2

        await wait_for(relayed, timeout=30, what="the reminder and the escalation at the relay")
        got = sorted((r.rcpt_tos[0], r.message["Subject"]) for r in smtp.recorder.received)
        assert got == [
            ("bob@example.org", "Reminder: invoice 13"),
            ("boss@example.org", "Escalation: laptop for Ann"),
        ]
        assert up.query("SELECT count(*) FROM timer") == [(0,)]


async def test_the_digest_goes_out_on_the_deployment_s_schedule(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    fast = {"MAILRUN_BACKOFF_MAX": "0.2"}
    async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=fast) as up:
        dep = await up.deploy("digest", recipes()["digest"])
        run_id = await _mail(up, dep["address"], "first", **{"from": "ann@example.org"})
        await _mail(up, dep["address"], "second", **{"from": "bob@example.org"})
        await up.wait_state(run_id, lambda r: len(r["state"].get("since", [])) == 2)
        # Every second instead of "0 8 * * *": the item is the same.
        payload = json.dumps({"to": "team@example.org"})
        code, out = await mailrun(
            up, "schedule", "add", dep["id"], "--every", "1", "--payload", payload
        )
        assert code == 0, out

        def digested() -> bool:
            return len(smtp.recorder.received) >= 1

        await wait_for(digested, timeout=30, what="the digest at the relay")
        first = smtp.recorder.received[0]
        assert first.rcpt_tos == ["team@example.org"]
        assert first.message["Subject"] == "Digest: 2 mail(s)"
        # The relay carries lines as SMTP does: CRLF.
        assert first.message.get_content().splitlines() == [
            "ann@example.org: first",
            "bob@example.org: second",
        ]


async def test_the_ticket_is_created_once(tmp_path: Path, smtp: SmtpServer) -> None:
    # The handler fails once after its step: the item is processed again,
    # and the step returns the recorded ticket instead of creating another.
    flaky = (
        "\n_main = main\n_failed = []\n\n\nasync def main(ctx, item):\n"
        "    await _main(ctx, item)\n    if not _failed:\n"
        "        _failed.append(item.dispatch_id)\n        raise RuntimeError('after the step')\n"
    )
    fast = {"MAILRUN_BACKOFF_MAX": "0.2"}
    with ticket_server() as tickets:
        tickets.failures = 2  # the step's retries get through
        source = recipes()["ticket"] + f"\nTICKETS = {tickets.url!r}\n" + flaky
        async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=fast) as up:
            dep = await up.deploy("ticket", source, max_backoff=0.2)
            run_id = await _mail(
                up, dep["address"], "printer on fire", **{"from": "ann@example.org"}
            )
            run = await up.wait_state(run_id, lambda r: r["state"].get("tickets"), timeout=30)
            assert run["state"]["tickets"] == {"printer on fire": "T-1"}

            def replied() -> bool:
                return len(smtp.recorder.received) >= 1

            await wait_for(replied, timeout=30, what="the ticket's number at the relay")
            (reply,) = smtp.recorder.received
            assert reply.message["Subject"] == "[T-1] printer on fire"
        assert [t["title"] for t in tickets.created] == ["printer on fire"]
        assert tickets.requests == 3


async def test_the_newsletter_stops_writing_to_an_address_that_bounced(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    gone = "gone@example.org"
    smtp.recorder.answers[gone] = ["550 5.1.1 <gone@example.org>: mailbox unknown"]
    fast = {"MAILRUN_BACKOFF_MAX": "0.2"}
    async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=fast) as up:
        dep = await up.deploy("newsletter", recipes()["newsletter"])
        run_id = await _mail(up, dep["address"], "Issue 1", "news")
        run = await up.wait_state(run_id, lambda r: r["state"].get("dead"), timeout=30)
        assert run["state"]["dead"] == {gone: "5.1.1"}
        await _mail(up, dep["address"], "Issue 2", "more news")

        def relayed() -> bool:
            return len(smtp.recorder.received) >= 4

        await wait_for(relayed, timeout=30, what="issue 1 to two and issue 2 to two")
        got = sorted((r.message["Subject"], r.rcpt_tos[0]) for r in smtp.recorder.received)
        # The relay records a mail once its 250 is read, a moment after the
        # server has the mail: wait for the records, not for the server.
        settled = [
            ("ann@example.org", "sent"),
            ("ann@example.org", "sent"),
            ("bob@example.org", "sent"),
            ("bob@example.org", "sent"),
            (gone, "bounced"),
        ]

        def statuses() -> list[tuple[Any, ...]]:
            return sorted(up.query("SELECT recipient, status FROM outbound_mail"))

        await wait_for(
            lambda: statuses() == settled,
            timeout=30,
            what="every outbound mail sent or bounced",
            explain=lambda: repr(statuses()),
        )
    assert got == [
        ("Issue 1", "ann@example.org"),
        ("Issue 1", "bob@example.org"),
        ("Issue 2", "ann@example.org"),
        ("Issue 2", "bob@example.org"),
    ]
    assert smtp.recorder.refused == ["550 5.1.1 <gone@example.org>: mailbox unknown"]
