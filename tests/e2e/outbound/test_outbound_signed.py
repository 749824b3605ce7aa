"""Mail that leaves signed, through real processes: a run's ``ctx.send``
reaches an SMTP server (aiosmtpd) through ``mailrun up --smtp-relay ...
--dkim-key ... --dkim-selector ...``, its DKIM signature verified by dkimpy
against the record ``mailrun dkim-record`` printed, its Reply-To the run's
signed reply address, its Message-ID the one ``ctx.send`` returned."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import dkim
import pytest

from hub.mailbox import bounce_address, parse_address, verify_token
from hub.store.mail import REPLY_KEY
from tests.support import wait_for
from tests.support.servers.smtp import SmtpServer

from ..harness import MAILRUN, Up, mailrun_up

pytestmark = pytest.mark.anyio

OUTSIDE = "someone@example.org"
FAST = {"MAILRUN_BACKOFF_MAX": "0.2"}

PLAIN = """
async def main(ctx, item):
    ctx.state["sent"] = ctx.send("someone@example.org", "re: " + item.subject, "hello")
"""

RICH = """
async def main(ctx, item):
    ctx.state["sent"] = ctx.send(
        "someone@example.org",
        "re: " + item.subject,
        "hello",
        html="<p>hello</p>",
        attachments=[("report.pdf", b"%PDF-1.7", "application/pdf")],
    )
"""


async def dkim_record(key: Path) -> str:
    done = await anyio.run_process(
        [MAILRUN, "dkim-record", "--dkim-key", str(key), "--dkim-selector", "s2026",
         "--domain", "mailrun.local", "--generate"],
    )  # fmt: skip
    return done.stdout.decode().strip()


def txt_of(record: str) -> tuple[bytes, bytes]:
    name, _, rest = record.partition(" IN TXT ")
    return name.encode(), "".join(re.findall(r'"([^"]*)"', rest)).encode()


async def sent_row(up: Up, subject: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        r = await up.http.get("/outbox", params={"status": "sent"})
        assert r.status_code == 200, r.text
        return next((m for m in r.json()["outbox"] if m["subject"] == subject), None)

    return await wait_for(probe, timeout=60, what=f"outgoing {subject!r} sent")


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(PLAIN, id="plain"),
        pytest.param(RICH, id="rich"),
    ],
)
async def test_a_runs_mail_leaves_signed_with_its_reply_address_and_message_id(
    tmp_path: Path, smtp: SmtpServer, source: str
) -> None:
    key = tmp_path / "keys" / "dkim.pem"
    key.parent.mkdir()
    record = await dkim_record(key)
    args = ["--smtp-relay", smtp.address, "--dkim-key", str(key), "--dkim-selector", "s2026"]
    async with mailrun_up(tmp_path, *args, env=FAST) as up:
        dep = await up.deploy("notifier", source)
        receipt = (await up.send(dep["address"], "order 7")).json()
        row = await sent_row(up, "re: order 7")
        run = await up.wait_state(receipt["run_id"], lambda r: "sent" in r["state"])
        (reply_key,) = up.query("SELECT value FROM hub_secret WHERE name = ?", REPLY_KEY)[0]

    (copy,) = smtp.recorder.copies(row["message_id"])
    assert copy.rcpt_tos == [OUTSIDE] and copy.message["From"] == dep["address"]
    # The envelope sender: the mail's signed bounce address (docs/smtp.md, "Bounces").
    assert copy.mail_from == bounce_address(bytes(reply_key), dep["address"], row["id"])
    message = copy.message
    # Signed: dkimpy verifies it against the record that was printed.
    name, value = txt_of(record)
    assert name == b"s2026._domainkey.mailrun.local."

    def dns(query: bytes, timeout: float = 5) -> bytes | None:
        return value if query == name else None

    assert dkim.verify(copy.data, dnsfunc=dns)
    assert not dkim.verify(copy.data.replace(b"hello", b"HELLO"), dnsfunc=dns)
    # Reply-To: the run's signed reply address, naming this mail's row.
    reply = parse_address(message["Reply-To"].addresses[0].addr_spec)
    assert reply.base == dep["address"] and reply.tag is not None
    assert verify_token(bytes(reply_key), dep["address"], reply.tag) == row["id"]
    # The Message-ID is the one ctx.send returned, made from the dispatch.
    expected = f"<{receipt['dispatch_id']}.1@mailrun.local>"
    assert run["state"]["sent"] == expected == message["Message-ID"] == row["message_id"]
    if source is RICH:
        html = message.get_body(preferencelist=("html",))
        assert html is not None and html.get_content().strip() == "<p>hello</p>"
        (pdf,) = message.iter_attachments()
        assert (pdf.get_filename(), pdf.get_content_type()) == ("report.pdf", "application/pdf")
        assert pdf.get_payload(decode=True) == b"%PDF-1.7"
