"""Rich outbound mail through the relay loop to a real SMTP server (aiosmtpd):
each recipient (To and Cc) asked, the message signed with DKIM so that
dkimpy verifies it against the record ``mailrun dkim-record`` printed, its
Reply-To the run's signed reply address; a refused Cc refuses the mail, and
an address that is not ASCII goes only to a relay that offers SMTPUTF8."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import dkim
import pytest
from click.testing import CliRunner

from hub.cli import main
from hub.mailbox import bounce_address, parse_address, verify_token
from hub.outbound import DkimSigner, Outbox, RelayConfig, dkim_signer, relay_config
from hub.store import (
    OutboundMail,
    OutboundSpec,
    OutboundStatus,
    Store,
    decode_spec,
    due_mail,
    mark_sending,
    mark_sent,
    open_store,
    record_outbound,
)
from hub.store.mail import REPLY_KEY, hub_secret
from runtime import new_id
from runtime.wire import Attachment
from tests.support.servers.smtp import Received, SmtpServer

from .test_relay import reaches, row_of

pytestmark = pytest.mark.anyio

SENDER = "flow@mailrun.local"
TO = "someone@example.org"
PDF = Attachment(filename="report.pdf", content_type="application/pdf", data=b"%PDF-1.7\n\xff")
RICH = OutboundSpec(
    html="<p>the <b>html</b></p>",
    cc=("Zoë <zoe@example.org>", "bob@example.org"),
    in_reply_to="<q-1@example.org>",
    references=("<q-1@example.org>",),
    headers={"X-Order": "7"},
    attachments=(PDF,),
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with await open_store(tmp_path / "hub.db") as store:
        yield store


def relay_of(server: SmtpServer) -> RelayConfig:
    return dataclasses.replace(relay_config(server.address, {}), timeout=5.0)


def dkim_record(key: Path, selector: str, domain: str) -> str:
    """What ``mailrun dkim-record --generate`` prints (and the key it made)."""
    args = ["dkim-record", "--dkim-key", str(key), "--dkim-selector", selector]
    result = CliRunner().invoke(main, [*args, "--domain", domain, "--generate"])
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def dns_of(*records: str) -> Callable[..., bytes | None]:
    """dkimpy's ``dnsfunc`` answering with the TXT records, as printed."""
    zone: dict[bytes, bytes] = {}
    for record in records:
        name, _, rest = record.partition(" IN TXT ")
        zone[name.encode()] = "".join(re.findall(r'"([^"]*)"', rest)).encode()

    def lookup(name: bytes, timeout: float = 5) -> bytes | None:
        return zone.get(name)

    return lookup


def tags_of(copy: Received) -> dict[str, str]:
    header = str(copy.message["DKIM-Signature"])
    return {k.strip(): v.strip() for k, _, v in (t.partition("=") for t in header.split(";"))}


async def add_mail(
    store: Store, spec: OutboundSpec = RICH, to: str = TO, sender: str = SENDER
) -> dict[str, Any]:
    event_id = new_id("evt")
    mail = OutboundMail(
        deployment_id=new_id("dep"), run_id=new_id("run"), event_id=event_id,
        send_key=event_id, sender=sender, recipient=to, subject="Grüße", body=b"the text\n",
        header_id=f"<{new_id('dsp')}.1@mailrun.local>", spec=spec,
    )  # fmt: skip
    status = OutboundStatus.PENDING
    assert await store.transact(partial(record_outbound, mails=[mail], status=status)) == 1
    return await row_of(store, event_id)


@asynccontextmanager
async def relaying(
    store: Store, relay: RelayConfig, signer: DkimSigner | None = None
) -> AsyncIterator[Outbox]:
    outbox = Outbox(store, relay, backoff_max=0.05, dkim=signer)
    async with anyio.create_task_group() as tg:
        await tg.start(outbox.run)
        yield outbox
        tg.cancel_scope.cancel()


async def test_a_rich_mail_reaches_every_recipient_signed_and_with_its_reply_address(
    tmp_path: Path, store: Store, smtp: SmtpServer
) -> None:
    key = tmp_path / "dkim.pem"
    record = dkim_record(key, "s1", "mailrun.local")
    signer = dkim_signer([str(key)], ["s1"])
    async with relaying(store, relay_of(smtp), signer) as outbox:
        row = await add_mail(store)
        outbox.wake()
        sent = await reaches(store, row, "sent")
    reply_key = await store.transact(partial(hub_secret, name=REPLY_KEY))

    (copy,) = smtp.recorder.copies(row["message_id"])
    assert copy.rcpt_tos == [TO, "zoe@example.org", "bob@example.org"]
    # The envelope sender is the mail's signed bounce address (VERP).
    assert copy.mail_from == bounce_address(reply_key, SENDER, row["id"])
    message = copy.message
    assert message["Message-ID"] == row["message_id"]
    assert (message["Subject"], message["In-Reply-To"], message["X-Order"]) == (
        "Grüße",
        "<q-1@example.org>",
        "7",
    )
    assert [str(a) for a in message["Cc"].addresses] == [
        "Zoë <zoe@example.org>",
        "bob@example.org",
    ]
    html = message.get_body(preferencelist=("html",))
    assert html is not None and html.get_content().strip() == "<p>the <b>html</b></p>"
    (pdf,) = message.iter_attachments()
    assert (pdf.get_filename(), pdf.get_payload(decode=True)) == ("report.pdf", PDF.data)

    # Signed: dkimpy verifies it against the printed record, and nothing else.
    dns = dns_of(record)
    assert dkim.verify(copy.data, dnsfunc=dns)
    tags = tags_of(copy)
    assert (tags["d"], tags["s"], tags["c"], tags["a"]) == (
        "mailrun.local",
        "s1",
        "relaxed/relaxed",
        "rsa-sha256",
    )
    signed = {h.strip() for h in tags["h"].split(":")}
    assert {"from", "to", "cc", "subject", "date", "message-id", "reply-to"} <= signed
    assert not dkim.verify(copy.data.replace(b"Subject:", b"Subject: FW:"), dnsfunc=dns)

    # Reply-To: the run's signed reply address, naming this very row.
    reply = parse_address(message["Reply-To"].addresses[0].addr_spec)
    assert reply.base == SENDER and reply.tag is not None
    assert verify_token(reply_key, SENDER, reply.tag) == row["id"]
    assert (sent["body"], sent["spec"]) == (None, None)  # the relay's now


async def test_a_reply_to_of_the_runs_own_replaces_the_signed_one(
    store: Store, smtp: SmtpServer
) -> None:
    async with relaying(store, relay_of(smtp)) as outbox:
        row = await add_mail(store, OutboundSpec(reply_to="Desk <desk@example.org>"))
        outbox.wake()
        await reaches(store, row, "sent")
    (copy,) = smtp.recorder.copies(row["message_id"])
    assert copy.message.get_all("Reply-To") == ["Desk <desk@example.org>"]
    assert "DKIM-Signature" not in copy.message  # no --dkim-key: unsigned


async def test_each_domain_is_signed_by_its_own_key_and_one_without_a_key_is_not(
    tmp_path: Path, store: Store, smtp: SmtpServer
) -> None:
    key_a, key_b = tmp_path / "a.pem", tmp_path / "b.pem"
    records = dkim_record(key_a, "sa", "a.example"), dkim_record(key_b, "sb", "b.example")
    signer = dkim_signer(
        [f"a.example={key_a}", f"b.example={key_b}"],
        ["a.example=sa", "b.example=sb"],
    )
    async with relaying(store, relay_of(smtp), signer) as outbox:
        rows = [
            await add_mail(store, sender=f"flow@{domain}")
            for domain in ("a.example", "b.example", "c.example")
        ]
        outbox.wake()
        for row in rows:
            await reaches(store, row, "sent")
    copies = [smtp.recorder.copies(row["message_id"])[0] for row in rows]
    assert [tags_of(c)["d"] for c in copies[:2]] == ["a.example", "b.example"]
    assert [tags_of(c)["s"] for c in copies[:2]] == ["sa", "sb"]
    assert all(dkim.verify(c.data, dnsfunc=dns_of(*records)) for c in copies[:2])
    # Each verifies only against its own domain's record.
    assert not dkim.verify(copies[0].data, dnsfunc=dns_of(records[1]))
    assert "DKIM-Signature" not in copies[2].message
    # A header the mail does not have is signed as absent: nobody on the way adds it.
    plain = await add_plain(store, smtp, signer)
    assert dkim.verify(plain.data, dnsfunc=dns_of(*records))
    added = plain.data.replace(b"\r\nFrom:", b"\r\nCc: evil@example.org\r\nFrom:", 1)
    assert added != plain.data and not dkim.verify(added, dnsfunc=dns_of(*records))


async def add_plain(store: Store, smtp: SmtpServer, signer: DkimSigner | None) -> Received:
    async with relaying(store, relay_of(smtp), signer) as outbox:
        row = await add_mail(store, OutboundSpec(), sender="flow@a.example")
        outbox.wake()
        await reaches(store, row, "sent")
    (copy,) = smtp.recorder.copies(row["message_id"])
    assert copy.message["Cc"] is None
    return copy


async def test_a_refused_cc_refuses_the_whole_mail_and_names_it(
    store: Store, smtp: SmtpServer
) -> None:
    smtp.recorder.answers["bob@example.org"] = ["550 5.1.1 no such user"]
    async with relaying(store, relay_of(smtp)) as outbox:
        row = await add_mail(store)
        outbox.wake()
        # A relay's 5xx: the mail bounced (its run gets a bounce item).
        failed = await reaches(store, row, "bounced")
        # The connection goes on: the next mail is sent.
        later = await add_mail(store, OutboundSpec())
        outbox.wake()
        await reaches(store, later, "sent")
    assert failed["last_error"] == "refused bob@example.org: 550 5.1.1 no such user"
    assert failed["relay_answer"] == "550 5.1.1 no such user"
    assert (failed["bounce_source"], failed["bounce_status"]) == ("relay", "5.1.1")
    assert smtp.recorder.copies(row["message_id"]) == []
    assert len(smtp.recorder.received) == 1


async def test_an_address_that_is_not_ascii_needs_a_relay_with_smtputf8(store: Store) -> None:
    spec = OutboundSpec(cc=("zoë@exämple.org",))
    plain, utf8 = SmtpServer(smtputf8=False), SmtpServer()
    for server in (plain, utf8):
        server.start()
    try:
        async with relaying(store, relay_of(plain)) as outbox:
            refused = await add_mail(store, spec)
            outbox.wake()
            failed = await reaches(store, refused, "failed")
        assert str(failed["last_error"]).startswith("invalid_address: ")
        assert plain.recorder.received == []
        async with relaying(store, relay_of(utf8)) as outbox:
            row = await add_mail(store, spec)
            outbox.wake()
            await reaches(store, row, "sent")
        (copy,) = utf8.recorder.copies(row["message_id"])
        assert copy.rcpt_tos == [TO, "zoë@exämple.org"]
        assert copy.message["Cc"] == "zoë@exämple.org"
    finally:
        for server in (plain, utf8):
            server.stop()


async def test_the_rich_parts_are_kept_until_sent_on_either_store(database: str) -> None:
    async with await open_store(database) as store:
        row = await add_mail(store)
        (due,) = await due_mail(store, now=time.time() + 1, limit=10)
        assert due.id == row["id"] and decode_spec(due.spec) == RICH
        assert await mark_sending(store, due.id)
        await mark_sent(store, due.id, "250 ok")
        sent = await row_of(store, row["event_id"])
        assert (sent["status"], sent["spec"], sent["body"]) == ("sent", None, None)
