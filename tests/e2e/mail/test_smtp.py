"""The SMTP ingress under a real `mailrun up --smtp` (nats-server, hub and
sidecars as OS processes), with ``smtplib`` as the mail client."""

from __future__ import annotations

import hashlib
import os
import signal
import smtplib
import ssl
from collections.abc import Callable
from email.message import EmailMessage
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.policy import SMTP
from email.utils import make_msgid
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from runtime.wire import BLOB_CHUNK_SIZE
from tests.support import free_port, wait_for
from tests.support.servers.smtp import self_signed

from ..harness import MAILRUN, Up, mailrun_up, restarted_hub

pytestmark = pytest.mark.anyio
T = TypeVar("T")

# Records what reached the handler, in order.
RECORDER = """
async def main(ctx, item):
    ctx.state.setdefault("seen", []).append([item.sender, item.subject, item.text])
"""
# Records, besides, what the raw message says that the trigger's fields do
# not: a header of its own, its attachments, and its digest.
RAW_RECORDER = """
import email
import email.policy
import hashlib


async def main(ctx, item):
    message = email.message_from_bytes(item.raw, policy=email.policy.default)
    attachments = [[p.get_filename(), len(p.get_content())] for p in message.iter_attachments()]
    ctx.state.setdefault("seen", []).append([
        item.sender, item.subject, item.text,
        str(message["X-Order"]), attachments, hashlib.sha256(item.raw).hexdigest(),
    ])
"""
LOGIN = {"MAILRUN_SMTP_USER": "robot", "MAILRUN_SMTP_PASSWORD": "s3cret"}


async def client(port: int, work: Callable[[smtplib.SMTP], T]) -> T:
    """``work`` on an smtplib client connected to the hub, in a worker thread."""

    def run() -> T:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
            return work(smtp)

    return await anyio.to_thread.run_sync(run)


async def send(port: int, message: EmailMessage | MIMEMultipart, *to: str) -> Any:
    return await client(port, lambda s: s.send_message(message, to_addrs=list(to)))


def mail(sender: str, subject: str, body: str, message_id: str | None = None) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["Subject"] = subject
    message["Message-ID"] = message_id or make_msgid(domain="example.com")
    message.set_content(body)
    return message


async def seen(up: Up, deployment_id: str, count: int) -> list[list[str]]:
    """What the handler recorded, once it recorded ``count`` items and the
    hub holds no other dispatch for the deployment."""

    async def top_level() -> str | None:
        rows = up.query(
            "SELECT id FROM workflow_run WHERE deployment_id = ? AND is_top_level = 1",
            deployment_id,
        )
        return str(rows[0][0]) if rows else None

    run_id = await wait_for(top_level, what="the deployment's run")
    run = await up.wait_state(run_id, lambda r: len(r["state"].get("seen", [])) >= count)
    rows = up.query(
        "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ?", deployment_id
    )
    assert rows == [("processed",)] * count
    items: list[list[str]] = run["state"]["seen"]
    return items


async def test_mail_over_smtp_reaches_the_run_once_each_in_order(tmp_path: Path) -> None:
    port = free_port()
    async with mailrun_up(tmp_path, "--smtp", f"127.0.0.1:{port}") as up:
        dep = await up.deploy("orders", RECORDER)
        mime = await up.deploy("mime", RAW_RECORDER)
        announced = f"mailrun up: smtp 127.0.0.1:{port}"
        await wait_for(lambda: announced in (tmp_path / "up.log").read_text(), what=announced)

        first = mail("Alice <alice@example.com>", "first", "one")
        await send(port, first, dep["address"])
        await send(port, mail("bob@example.com", "second", "two"), dep["address"])
        await send(port, first, dep["address"])  # a client's retry: the same Message-ID
        third = mail("carol@example.com", "third", "three\nlines")
        del third["Message-ID"]  # without one, each send is a trigger of its own
        await send(port, third, dep["address"])
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            await send(port, mail("dave@example.com", "lost", "?"), "nobody@mailrun.local")
        code, answer = refused.value.recipients["nobody@mailrun.local"]
        assert code == 550 and answer.startswith(b"5.1.1")

        assert await seen(up, dep["id"], 3) == [
            ["alice@example.com", "first", "one\n"],
            ["bob@example.com", "second", "two\n"],
            ["carol@example.com", "third", "three\nlines\n"],
        ]

        # Multipart, an RFC 2047 subject, a base64 text/plain part, and an
        # attachment that makes the raw message span several blob chunks.
        text = MIMEMultipart("alternative")
        text.attach(MIMEText("Grüße aus Köln ✓", "plain", "utf-8"))
        text.attach(MIMEText("<p>Grüße</p>", "html", "utf-8"))
        message = MIMEMultipart("mixed")
        message["From"] = "=?utf-8?q?J=C3=B6rg?= <jorg@example.com>"
        message["Subject"] = "=?utf-8?b?w5xiZXJzaWNodCDinJM=?="
        message["X-Order"] = "7"
        message.attach(text)
        invoice = MIMEApplication(bytes(range(256)) * 3000, Name="invoice.pdf")
        invoice["Content-Disposition"] = 'attachment; filename="invoice.pdf"'
        message.attach(invoice)
        # As smtplib sends it (CRLF line ends; aiosmtpd undoes dot-stuffing).
        raw = message.as_bytes(policy=SMTP)
        assert b"Content-Transfer-Encoding: base64" in raw and len(raw) > BLOB_CHUNK_SIZE
        await client(port, lambda s: s.sendmail("jorg@example.com", [mime["address"]], raw))
        assert await seen(up, mime["id"], 1) == [
            [
                "jorg@example.com",
                "Übersicht ✓",
                "Grüße aus Köln ✓",
                "7",
                [["invoice.pdf", 256 * 3000]],
                hashlib.sha256(raw).hexdigest(),
            ]
        ]
        # Kept until the dispatch was settled, then collected with it.
        await wait_for(
            lambda: up.query("SELECT count(*) FROM blob WHERE size = ?", len(raw)) == [(0,)],
            what="the raw message's blob collected",
        )


async def test_starttls_and_auth_through_mailrun_up(tmp_path: Path) -> None:
    port = free_port()
    _, cert = self_signed(tmp_path)
    tls = ["--smtp-cert", str(cert), "--smtp-key", str(tmp_path / "relay.key")]
    async with mailrun_up(tmp_path, "--smtp", f"127.0.0.1:{port}", *tls, env=LOGIN) as up:
        dep = await up.deploy("secure", RECORDER)
        message = mail("alice@example.com", "secure", "over tls")

        def plain(smtp: smtplib.SMTP) -> tuple[bool, int, int]:
            smtp.ehlo()
            auth = smtp.docmd("AUTH", "PLAIN AHJvYm90AHMzY3JldA==")[0]
            return smtp.has_extn("auth"), auth, smtp.mail("alice@example.com")[0]

        assert await client(port, plain) == (False, 538, 530)  # no AUTH, no MAIL without TLS

        def over_tls(smtp: smtplib.SMTP) -> Any:
            smtp.starttls(context=ssl.create_default_context(cafile=str(cert)))
            smtp.login("robot", "s3cret")
            return smtp.send_message(message, to_addrs=[dep["address"]])

        assert await client(port, over_tls) == {}
        assert await seen(up, dep["id"], 1) == [["alice@example.com", "secure", "over tls\n"]]


async def test_a_reachable_bind_without_login_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILRUN_SMTP_")}
    anywhere = f"0.0.0.0:{free_port()}"
    commands = [
        [MAILRUN, "up", "--state-dir", str(tmp_path / "up"), "--smtp", anywhere],
        [MAILRUN, "hub", "--state-dir", str(tmp_path / "hub"), "--smtp", anywhere],
    ]
    for argv in commands:
        done = await anyio.run_process(argv, check=False, env=env)
        assert done.returncode == 1, argv
        output = (done.stdout + done.stderr).decode()
        assert "reachable from other hosts: set MAILRUN_SMTP_USER" in output, output
    assert not (tmp_path / "up" / "hub.db").exists()  # `up` started nothing


async def test_250_only_after_commit_a_hub_crash_before_it_is_retried_once(
    tmp_path: Path,
) -> None:
    """The hub dies inside the accepting transaction, before COMMIT: the client
    gets no 250, `up` restarts the hub, the client sends the same message
    again and the run sees it once.

    The crash is a ``pause`` at ``hub.accept.before_commit`` and a SIGKILL
    while the hub is held there: ``up`` passes its environment to every hub it
    starts, and failpoint counts live in the process, so ``1*crash`` would
    crash the restarted hub too, at the retry (docs/faults.md)."""
    port = free_port()
    gate = tmp_path / "accept-gate"
    reached = Path(f"{gate}.reached")
    env = {"MAILRUN_FAILPOINTS": f"hub.accept.before_commit=pause({gate})"}
    async with mailrun_up(tmp_path, "--smtp", f"127.0.0.1:{port}", env=env) as up:
        dep = await up.deploy("crashy", RECORDER)
        message = mail("alice@example.com", "exactly once", "body")
        hub = await up.hub_pid()
        boot = (await up.healthz() or {})["boot_id"]
        outcome: list[BaseException] = []

        async def first_attempt() -> None:
            try:
                await send(port, message, dep["address"])
            except (smtplib.SMTPServerDisconnected, smtplib.SMTPResponseException) as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(first_attempt)
            await wait_for(reached.exists, timeout=30, what="the hub held before COMMIT")
            os.kill(hub, signal.SIGKILL)
        (error,) = outcome  # no 250: the connection went with the hub
        if isinstance(error, smtplib.SMTPResponseException):
            assert 400 <= error.smtp_code < 500
        gate.touch()  # the hubs from now on pass the failpoint
        assert up.query("SELECT count(*) FROM workflow_run_dispatch")[0][0] == 0

        await restarted_hub(up, boot)

        async def retried() -> Any:
            try:
                return await send(port, message, dep["address"]) == {}
            except (OSError, smtplib.SMTPException):
                return None  # not listening yet

        await wait_for(retried, timeout=30, what="the retry to be accepted")
        assert await send(port, message, dep["address"]) == {}  # and once more: a duplicate
        assert await seen(up, dep["id"], 1) == [["alice@example.com", "exactly once", "body\n"]]
        assert up.query("SELECT count(*), min(message_id) FROM workflow_run_dispatch") == [
            (1, message["Message-ID"])
        ]
