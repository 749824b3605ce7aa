"""The test kit's mail: what a run sent (its Message-ID, its rich parts), a
reply that finds the child run that asked, a bounce back to it, and mail
that comes with a tag and sender checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sidecar import AuthVerdict, MailAuth
from sidecar.testing import RunEnded, UnknownMail, WorkflowTest

pytestmark = pytest.mark.anyio

AUTH = MailAuth(
    spf=AuthVerdict(result="pass", domain="example.net"),
    dkim=AuthVerdict(result="none"),
    dmarc=AuthVerdict(result="fail", domain="example.net", detail="quarantine"),
)


async def main(ctx: Any, item: Any) -> None:
    """An order (by mail) asks its buyer in a child run; the answer ends it."""
    if item.kind == "mail" and item.in_reply_to is None:
        ctx.state["order"] = [item.tag, item.to, item.auth.dmarc.result if item.auth else None]
        await ctx.spawn("flow:ask", {"buyer": item.sender})
    elif item.kind == "mail":
        ctx.state["late"] = [item.text, item.in_reply_to, item.routed_by]
    elif item.kind == "child":
        ctx.state["answer"] = item.result


async def ask(ctx: Any, item: Any) -> None:
    if item.kind == "start":
        ctx.state["asked"] = ctx.send(
            item.input["buyer"],
            "Ship it?",
            "yes or no",
            html="<p><b>yes</b> or no</p>",
            headers={"X-Order": "7"},
            attachments=[("order.csv", b"sku,qty\nA,1\n")],
        )
        ctx.state["fyi"] = ctx.send("gone@example.net", "FYI", cc=["desk@example.org"])
    elif item.kind == "bounce":
        ctx.state.setdefault("bounced", []).append(
            [item.message_id, item.recipient, item.status, item.diagnostic, item.source]
        )
    elif item.kind == "mail":
        ctx.complete({"answer": item.text, "thread": item.thread, "routed_by": item.routed_by})


async def test_a_reply_reaches_the_child_that_asked_and_a_bounce_reaches_it_once() -> None:
    async with WorkflowTest(main, {"flow:ask": ask}, name="shop", domain="example.org") as wf:
        await wf.mail("order", sender="ann@example.net", tag="books", auth=AUTH)
        assert wf.state["order"] == ["books", "shop+books@example.org", "fail"]
        (child,) = wf.run().children
        asked, fyi = wf.run(child).state["asked"], wf.run(child).state["fyi"]
        assert asked.startswith("<dsp_") and asked.endswith(".1@example.org>")
        assert fyi.endswith(".2@example.org>")

        question, note = wf.sent
        assert (question.run_id, question.header_id) == (child, asked)
        assert question.to == "ann@example.net"
        assert question.headers["Message-ID"] == asked
        assert question.headers["X-Order"] == "7"
        assert question.html == "<p><b>yes</b> or no</p>"
        assert [(a.filename, a.content_type) for a in question.attachments] == [
            ("order.csv", "text/csv")
        ]
        assert (note.cc, note.headers["Cc"]) == (["desk@example.org"], "desk@example.org")

        first = await wf.bounce(fyi, "5.1.1", "550 5.1.1 no such user")
        again = await wf.bounce(fyi, "5.1.1", "550 5.1.1 no such user")
        assert again.duplicate and again.dispatch_id == first.dispatch_id
        assert wf.run(child).state["bounced"] == [
            [fyi, "gone@example.net", "5.1.1", "550 5.1.1 no such user", "relay"]
        ]

        await wf.reply(asked, "yes")
        assert wf.run(child).status == "completed"
        assert wf.run(child).result == {"answer": "yes", "thread": [asked], "routed_by": "headers"}
        assert wf.state["answer"] == wf.run(child).result
        assert wf.run().status == "running"

        # The child has ended: the deployment's default sends the reply to the top-level run.
        await wf.reply(question, "no, after all")
        assert wf.state["late"] == ["no, after all", asked, ""]


async def test_a_reply_to_an_ended_run_is_refused_when_the_deployment_says_so() -> None:
    async with WorkflowTest(main, {"flow:ask": ask}, replies_to_ended="refuse") as wf:
        await wf.mail("order", sender="ann@example.net")
        asked = wf.sent[0].header_id
        assert asked.endswith("@mailrun.local>")
        await wf.reply(asked, "yes")
        with pytest.raises(RunEnded):
            await wf.reply(asked, "again")
        assert "late" not in wf.state


async def test_a_reply_or_bounce_to_a_mail_nobody_sent_is_refused() -> None:
    async with WorkflowTest(main, {"flow:ask": ask}) as wf:
        await wf.mail("order", sender="ann@example.net")
        with pytest.raises(UnknownMail):
            await wf.reply("<nobody@example.org>", "hi")
        with pytest.raises(UnknownMail):
            await wf.bounce("<nobody@example.org>")
        # A mail whose headers name no sent mail is plain mail to the top-level run.
        await wf.mail("hello", in_reply_to="<elsewhere@example.net>")
        assert wf.state["late"] == ["", "<elsewhere@example.net>", ""]


async def test_the_page_s_reply_and_bounce_example_works() -> None:
    page = Path(__file__).parents[3] / "docs" / "testing-workflows.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    example: dict[str, Any] = {}
    exec(next(b for b in blocks if "async def ask" in b), example)

    async def parent(ctx: Any, item: Any) -> None:
        if item.kind == "mail" and item.in_reply_to is None:
            await ctx.spawn("flow:ask", {"to": item.sender})

    async with WorkflowTest(parent, {"flow:ask": example["ask"]}) as wf:
        await wf.mail("order", sender="ann@example.net")
        await wf.mail("order", sender="bob@example.net")
        ann, bob = wf.run().children
        await wf.reply(wf.run(ann).sent[0].header_id, "yes")
        await wf.bounce(wf.run(bob).sent[0], diagnostic="no such user")
        assert (wf.run(ann).status, wf.run(ann).result) == ("completed", "yes")
        assert wf.run(bob).status == "failed"
        assert wf.run(bob).error == "bob@example.net: 5.1.1 no such user"


async def test_mail_a_run_sends_to_its_own_tagged_address_comes_back_with_the_tag() -> None:
    async def loop(ctx: Any, item: Any) -> None:
        ctx.state.setdefault("seen", []).append([item.subject, item.to, item.tag])
        if item.subject == "go":
            ctx.send("flow+later@mailrun.local", "again")

    async with WorkflowTest(loop) as wf:
        await wf.mail("go")
        assert wf.sent[0].internal
        assert wf.state["seen"] == [
            ["go", "flow@mailrun.local", None],
            ["again", "flow+later@mailrun.local", "later"],
        ]
