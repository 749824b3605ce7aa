"""Bounces reach the run, in one process with real SMTP on both sides: the
relay loop against an SMTP sink that refuses one recipient, and delivery
status notifications sent with ``smtplib`` to the hub's own SMTP ingress,
at the bounce address a relayed mail carried as its envelope sender."""

from __future__ import annotations

import dataclasses
import smtplib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from hub import Acceptor, bind_socket
from hub.mailbox import bounce_row
from hub.outbound import Outbox, relay_config
from hub.smtp import SmtpServer as HubSmtp
from hub.smtp import smtp_config
from hub.store import (
    REPLY_KEY,
    Accepted,
    OutboundMail,
    OutboundStatus,
    Store,
    Trigger,
    create_deployment,
    hub_secret,
    open_store,
    record_outbound,
)
from runtime import new_id
from runtime.wire import BOUNCE_KIND, BounceReport
from tests.support import wait_for
from tests.support.servers.smtp import Received, SmtpServer, delivery_report
from tests.support.store import execute, rows
from tests.support.store import row as read_row

pytestmark = pytest.mark.anyio

GONE = "gone@example.org"
REFUSAL = "550 5.1.1 <gone@example.org>: mailbox unknown"


@dataclasses.dataclass
class Hub:
    store: Store
    outbox: Outbox
    smtp_port: int
    sink: SmtpServer
    deployment_id: str
    run_id: str
    sender: str

    async def send(self, to: str, subject: str = "hello", run_id: str | None = None) -> str:
        """A mail of the run to ``to``, as the wire side records it; its row id."""
        event_id = new_id("evt")
        mail = OutboundMail(
            deployment_id=self.deployment_id, run_id=run_id or self.run_id, event_id=event_id,
            send_key=event_id, sender=self.sender, recipient=to, subject=subject, body=b"hi",
        )  # fmt: skip
        assert await self.store.transact(
            partial(record_outbound, mails=[mail], status=OutboundStatus.PENDING)
        )
        self.outbox.wake()
        found = await read_row(
            self.store, "SELECT id FROM outbound_mail WHERE event_id = ?", event_id
        )
        assert found is not None
        return str(found["id"])

    async def mail(self, row_id: str) -> dict[str, Any]:
        found = await read_row(self.store, "SELECT * FROM outbound_mail WHERE id = ?", row_id)
        assert found is not None
        return found

    async def reaches(self, row_id: str, status: str) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            now = await self.mail(row_id)
            return now if now["status"] == status else None

        return await wait_for(probe, what=f"{row_id} {status}")

    async def bounces(self) -> list[tuple[Any, ...]]:
        """The bounce items stored: (run, message id, subject, body)."""
        return await rows(
            self.store,
            "SELECT run_id, message_id, subject, body FROM workflow_run_dispatch"
            " WHERE kind = ? ORDER BY seq",
            BOUNCE_KIND,
        )

    async def relayed(self, row_id: str) -> Received:
        """What the sink got of the mail in ``row_id``."""
        message_id = (await self.mail(row_id))["message_id"]
        (copy,) = self.sink.recorder.copies(message_id)
        return copy

    async def report(self, to: str, raw: bytes, mail_from: str = "") -> dict[str, Any]:
        """``raw`` sent with smtplib to the hub's ingress, for ``to``: what was refused."""

        def run() -> dict[str, Any]:
            with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=10) as smtp:
                return smtp.sendmail(mail_from, [to], raw)

        return await anyio.to_thread.run_sync(run)


@asynccontextmanager
async def hub(tmp_path: Path, sink: SmtpServer, database: str | None = None) -> AsyncIterator[Hub]:
    async with await open_store(database or tmp_path / "hub.db") as store:
        await create_deployment(
            store, name="notices", source="async def main(ctx, item): pass\n",
            domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
        )  # fmt: skip
        acceptor = Acceptor(store)
        config = smtp_config("127.0.0.1:0", {}, allow_port_zero=True)
        config = dataclasses.replace(config, hostname="mailrun.test")
        sock = bind_socket(config.host, config.port)
        ingress = HubSmtp(config, sock, store=store, acceptor=acceptor, max_body=1 << 20)
        relay = dataclasses.replace(relay_config(sink.address, {}), timeout=5.0)
        outbox = Outbox(store, relay, backoff_max=0.05)
        async with anyio.create_task_group() as tg:
            await tg.start(acceptor.run)
            await tg.start(ingress.run)
            await tg.start(outbox.run)
            first = await acceptor.accept(
                Trigger(address="notices@mailrun.local", message_id="<start@x>", subject="go")
            )
            assert isinstance(first, Accepted)
            yield Hub(
                store, outbox, ingress.address.port, sink, first.deployment_id, first.run_id,
                "notices@mailrun.local",
            )  # fmt: skip
            tg.cancel_scope.cancel()


def body_of(stored: tuple[Any, ...]) -> BounceReport:
    return msgspec.json.decode(stored[3], type=BounceReport)


async def test_a_relay_s_550_bounces_the_mail_to_its_run_once(
    tmp_path: Path, smtp: SmtpServer, database: str
) -> None:
    smtp.recorder.answers[GONE] = [REFUSAL] * 3
    async with hub(tmp_path, smtp, database) as h:
        gone = await h.send(GONE)
        bounced = await h.reaches(gone, "bounced")
        ok = await h.send("ann@example.org")
        await h.reaches(ok, "sent")  # the loop went on past the refusal
        (item,) = await h.bounces()
    assert (bounced["bounce_source"], bounced["bounce_status"]) == ("relay", "5.1.1")
    assert (bounced["bounce_diagnostic"], bounced["attempts"]) == (REFUSAL, 1)
    assert bounced["body"] is None
    assert item[:3] == (h.run_id, f"bounce:{gone}", bounced["message_id"])
    report = body_of(item)
    assert (report.message_id, report.recipient) == (bounced["message_id"], GONE)
    assert (report.status, report.diagnostic, report.source) == ("5.1.1", REFUSAL, "relay")
    assert report.bounced_at == bounced["bounced_at"]
    assert smtp.recorder.refused == [REFUSAL]  # asked once, never again


async def test_a_refusal_without_an_enhanced_code_is_5_0_0_and_an_ended_run_keeps_none(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    smtp.recorder.answers[GONE] = ["554 no"]
    async with hub(tmp_path, smtp) as h:
        await execute(
            h.store, "UPDATE workflow_run SET status = 'completed' WHERE id = ?", h.run_id
        )
        gone = await h.send(GONE)
        bounced = await h.reaches(gone, "bounced")
        assert await h.bounces() == []  # the accept path refused it: the run ended
    assert (bounced["bounce_status"], bounced["bounce_diagnostic"]) == ("5.0.0", "554 no")


async def test_a_mail_refused_before_any_smtp_fails_without_a_bounce(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    async with hub(tmp_path, smtp) as h:
        bad = await h.send("two@example.org, three@example.org")  # not one mailbox
        failed = await h.reaches(bad, "failed")
        assert await h.bounces() == []
    assert str(failed["last_error"]).startswith("invalid_address")
    assert failed["bounce_source"] is None


async def test_a_dsn_to_the_bounce_address_bounces_a_sent_mail_once(
    tmp_path: Path, smtp: SmtpServer, database: str
) -> None:
    async with hub(tmp_path, smtp, database) as h:
        gone = await h.send(GONE)
        sent = await h.reaches(gone, "sent")
        copy = await h.relayed(gone)
        key = await h.store.transact(partial(hub_secret, name=REPLY_KEY))
        assert bounce_row(key, copy.mail_from) == gone
        report = delivery_report(copy.mail_from, sent["message_id"], GONE)
        # Twice, as a reporting MTA that did not hear the first 250 sends it.
        assert await h.report(copy.mail_from, report) == {}
        assert await h.report(copy.mail_from, report) == {}
        bounced = await h.mail(gone)
        (item,) = await h.bounces()
    assert (bounced["status"], bounced["bounce_source"]) == ("bounced", "dsn")
    assert bounced["relay_answer"] == sent["relay_answer"]  # the relay's 250 is kept
    assert item[:3] == (h.run_id, f"bounce:{gone}", sent["message_id"])
    body = body_of(item)
    assert (body.message_id, body.recipient, body.status) == (sent["message_id"], GONE, "5.1.1")
    assert body.diagnostic == f"550 5.1.1 <{GONE}>: mailbox unknown"
    assert body.source == "dsn"


async def test_a_forged_or_foreign_bounce_address_is_refused_at_rcpt_and_nothing_is_kept(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    async with hub(tmp_path, smtp) as h:
        gone = await h.send(GONE)
        sent = await h.reaches(gone, "sent")
        real = (await h.relayed(gone)).mail_from
        name, _, domain = real.partition("@")
        forged = name[:-1] + ("0" if name[-1] != "0" else "1") + "@" + domain
        elsewhere = f"{name}@other.example"  # a token signed for another domain
        for address in (forged, elsewhere):
            with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
                await h.report(address, delivery_report(address, sent["message_id"], GONE))
            code, text = refused.value.recipients[address]
            assert code == 550 and text.startswith(b"5.1.1")
        assert await h.bounces() == []
        assert (await h.mail(gone))["status"] == "sent"


async def test_reports_that_are_no_failure_are_taken_and_dropped(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    async with hub(tmp_path, smtp) as h:
        gone = await h.send(GONE)
        sent = await h.reaches(gone, "sent")
        address = (await h.relayed(gone)).mail_from
        delayed = delivery_report(
            address, sent["message_id"], GONE, action="delayed", status="4.4.1"
        )
        plain = b"Subject: out of office\r\n\r\nback on monday\r\n"
        for raw in (delayed, plain, b"\x00\xff not a message at all"):
            assert await h.report(address, raw) == {}  # a bounce processor never bounces
        assert await h.bounces() == []
        assert (await h.mail(gone))["status"] == "sent"


async def test_a_report_also_addressed_to_a_deployment_is_split(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    async with hub(tmp_path, smtp) as h:
        gone = await h.send(GONE)
        sent = await h.reaches(gone, "sent")
        address = (await h.relayed(gone)).mail_from
        raw = delivery_report(address, sent["message_id"], GONE)

        def run() -> dict[str, Any]:
            with smtplib.SMTP("127.0.0.1", h.smtp_port, timeout=10) as client:
                return client.sendmail("", [address, "notices@mailrun.local"], raw)

        assert await anyio.to_thread.run_sync(run) == {}
        (item,) = await h.bounces()
        mails = await rows(
            h.store,
            "SELECT run_id, subject FROM workflow_run_dispatch WHERE kind = 'mail' ORDER BY seq",
        )
    assert item[1] == f"bounce:{gone}"
    assert mails == [
        (h.run_id, "go"),
        (h.run_id, "Undelivered Mail Returned to Sender"),
    ]
