"""Replies find the run that asked, with real SMTP both ways: the recipe
"ask" (docs/recipes.md) under a real ``mailrun up --smtp --smtp-relay``. A
child run mails a human through the relay (an SMTP sink here); the human's
answer comes back to the hub's SMTP server from ``smtplib`` and reaches that
child, by its In-Reply-To, or by the signed reply address alone; a forged
reply address is plain mail to the top-level run. The hub has two mail
domains (``--domain`` twice), and one deployment is made in the second."""

from __future__ import annotations

import json
import secrets
import smtplib
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from hub.mailbox import reply_address
from runtime.wire import MailContext
from tests.support import free_port, wait_for
from tests.support.servers.smtp import SmtpServer

from ..harness import Up, mailrun, mailrun_up
from ..mail.test_recipes import recipes

pytestmark = pytest.mark.anyio
BOSS = "boss@example.org"


async def smtp_send(port: int, message: EmailMessage, to: str) -> None:
    def run() -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
            client.send_message(message, to_addrs=[to])

    await anyio.to_thread.run_sync(run)


def answer(text: str, message_id: str, **headers: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = f"The Boss <{BOSS}>"
    message["Subject"] = "Re: Ship order-7?"
    message["Message-ID"] = message_id
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(f"{text}\n\n> Reply yes or no.\n")
    return message


async def asked(up: Up, dep: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Mail ``order-7`` to ``dep``: its top-level run, and the question its
    child sent, once the relay took it (``GET /outbox``)."""
    r = await up.send(dep["address"], "order-7", "", **{"from": BOSS})
    assert r.status_code == 202, r.text

    async def sent() -> dict[str, Any] | None:
        r = await up.http.get("/outbox", params={"deployment": dep["id"]})
        rows = [m for m in r.json()["outbox"] if m["deployment_id"] == dep["id"]]
        return rows[0] if rows and rows[0]["status"] == "sent" else None

    question = await wait_for(sent, timeout=60, what="the question at the relay")
    return str(r.json()["run_id"]), question


def dispatch_of(up: Up, message_id: str) -> tuple[str, MailContext]:
    ((run_id, context),) = up.query(
        "SELECT run_id, context FROM workflow_run_dispatch WHERE message_id = ?", message_id
    )
    return str(run_id), msgspec.msgpack.decode(bytes(context), type=MailContext)


async def test_a_childs_question_is_answered_by_headers_and_by_reply_address(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    port = free_port()
    options = ["--smtp", f"127.0.0.1:{port}", "--smtp-relay", smtp.address]
    domains = ["--domain", "mailrun.local", "--domain", "example.net"]
    env = {"MAILRUN_BACKOFF_MAX": "0.2"}
    async with mailrun_up(tmp_path, *options, *domains, env=env) as up:
        source = tmp_path / "flow.py"
        source.write_text(recipes()["ask"])
        first = await up.deploy("shipping", recipes()["ask"])
        code, out = await mailrun(
            up, "deploy", str(source), "--name", "depot", "--domain", "example.net", "--json"
        )
        assert code == 0, out
        second = json.loads(out)
        assert (first["address"], second["address"]) == (
            "shipping@mailrun.local",
            "depot@example.net",
        )

        # By headers: the answer names the question's Message-ID.
        top, question = await asked(up, first)
        (copy,) = smtp.recorder.copies(question["message_id"])
        assert copy.rcpt_tos == [BOSS] and copy.message["Subject"] == "Ship order-7?"
        reply = answer(
            "yes",
            "<a1@example.org>",
            In_Reply_To=question["message_id"],
            References=question["message_id"],
        )
        await smtp_send(port, reply, first["address"])
        run = await up.wait_state(top, lambda r: r["status"] == "completed", timeout=60)
        assert run["result"] == {"answer": "yes"}
        child, context = dispatch_of(up, "<a1@example.org>")
        assert child == question["run_id"] != top
        assert context == MailContext(
            to=first["address"],
            in_reply_to=question["message_id"],
            thread=[question["message_id"]],
            routed_by="headers",
        )
        assert (await up.run(child))["result"] == "yes"

        # By the reply address alone, in the second domain; a forged one first.
        top, question = await asked(up, second)
        row_digits = question["id"].removeprefix("out_")
        forged = f"depot+r-{row_digits}-{secrets.token_hex(8)}@example.net"
        await smtp_send(port, answer("forged", "<f1@example.org>"), forged)
        await wait_for(
            lambda: up.query(
                "SELECT 1 FROM workflow_run_dispatch WHERE message_id = ?", "<f1@example.org>"
            ),
            what="the forged reply stored",
        )
        run_id, context = dispatch_of(up, "<f1@example.org>")
        assert run_id == top and context.routed_by == "" and context.tag == forged[6:-12]
        ((key,),) = up.query("SELECT value FROM hub_secret WHERE name = 'reply_address'")
        address = reply_address(bytes(key), second["address"], question["id"])
        await smtp_send(port, answer("no", "<a2@example.org>"), address)
        run = await up.wait_state(top, lambda r: r["status"] == "completed", timeout=60)
        assert run["result"] == {"answer": "no"}
        child, context = dispatch_of(up, "<a2@example.org>")
        assert child == question["run_id"]
        assert context == MailContext(
            to=address, in_reply_to=question["message_id"], routed_by="reply_address"
        )

        # Nobody at the base address: refused at RCPT, tag or not.
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            await smtp_send(port, answer("?", "<x@example.org>"), "nobody+x@example.net")
        code, text = refused.value.recipients["nobody+x@example.net"]
        assert code == 550 and text.startswith(b"5.1.1")
