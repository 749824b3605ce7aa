"""The relay loop against a real SMTP server (aiosmtpd on a loopback port):
delivered once with the derived Message-ID, retried through an outage and
4xx answers, a 5xx refusal kept as bounced, a mail in doubt sent again with
the same Message-ID, login and STARTTLS."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from hub.mailbox import bounce_row
from hub.outbound import Outbox, RelayConfig, relay_config
from hub.store import (
    REPLY_KEY,
    OutboundMail,
    OutboundStatus,
    Store,
    hub_secret,
    open_store,
    record_outbound,
)
from runtime import new_id
from tests.support import wait_for
from tests.support.servers.smtp import SmtpServer, self_signed
from tests.support.store import execute
from tests.support.store import row as read_row

pytestmark = pytest.mark.anyio

SENDER = "flow@mailrun.local"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with await open_store(tmp_path / "hub.db") as store:
        yield store


async def reply_key(store: Store) -> bytes:
    return await store.transact(partial(hub_secret, name=REPLY_KEY))


def relay_of(server: SmtpServer, **changes: Any) -> RelayConfig:
    return dataclasses.replace(relay_config(server.address, {}), timeout=5.0, **changes)


async def add_mail(
    store: Store,
    to: str = "someone@example.org",
    subject: str = "hello",
    body: bytes = b"the body",
    status: OutboundStatus = OutboundStatus.PENDING,
) -> dict[str, Any]:
    event_id = new_id("evt")
    mail = OutboundMail(
        deployment_id=new_id("dep"), run_id=new_id("run"), event_id=event_id,
        send_key=event_id, sender=SENDER, recipient=to, subject=subject, body=body,
    )  # fmt: skip
    assert await store.transact(partial(record_outbound, mails=[mail], status=status)) == 1
    return await row_of(store, event_id)


async def row_of(store: Store, event_id: str) -> dict[str, Any]:
    found = await read_row(store, "SELECT * FROM outbound_mail WHERE event_id = ?", event_id)
    assert found is not None
    return found


async def reaches(store: Store, row: dict[str, Any], status: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        now = await row_of(store, row["event_id"])
        return now if now["status"] == status else None

    return await wait_for(probe, what=f"{row['event_id']} {status}")


@asynccontextmanager
async def relaying(store: Store, relay: RelayConfig | None) -> AsyncIterator[Outbox]:
    outbox = Outbox(store, relay, backoff_max=0.05)
    async with anyio.create_task_group() as tg:
        await tg.start(outbox.run)
        yield outbox
        tg.cancel_scope.cancel()


async def test_a_mail_is_relayed_once_with_its_derived_message_id(
    store: Store, smtp: SmtpServer
) -> None:
    async with relaying(store, relay_of(smtp)) as outbox:
        row = await add_mail(store, body="grüße".encode())
        outbox.wake()
        sent = await reaches(store, row, "sent")
        # Later work done means the loop looked again: the first was not resent.
        later = await add_mail(store)
        outbox.wake()
        await reaches(store, later, "sent")
    assert row["message_id"] == f"<{row['event_id']}@mailrun.local>"
    (copy,) = smtp.recorder.copies(row["message_id"])
    # The envelope sender is the mail's signed bounce address, at its sender's domain.
    assert copy.rcpt_tos == ["someone@example.org"]
    assert copy.mail_from.startswith("bounces+r-") and copy.mail_from.endswith("@mailrun.local")
    assert bounce_row(await reply_key(store), copy.mail_from) == row["id"]
    message = copy.message
    assert (message["From"], message["To"], message["Subject"]) == (
        SENDER,
        "someone@example.org",
        "hello",
    )
    assert message.get_content().rstrip("\r\n") == "grüße"
    assert sent["relay_answer"] == "250 2.0.0 queued as q1"
    assert (sent["attempts"], sent["in_doubt"], sent["last_error"]) == (1, 0, None)
    assert sent["sent_at"] >= sent["created_at"]
    assert sent["body"] is None  # the relay's now
    assert len(smtp.recorder.received) == 2


async def test_a_relay_down_at_first_gets_the_mail_once_it_is_up(store: Store) -> None:
    server = SmtpServer()  # its port is free: nothing listens yet
    async with relaying(store, relay_of(server)) as outbox:
        row = await add_mail(store)
        outbox.wake()

        async def retried() -> bool:
            now = await row_of(store, row["event_id"])
            return now["status"] == "pending" and now["attempts"] >= 3

        await wait_for(retried, what="three attempts at a relay that is down")
        down = await row_of(store, row["event_id"])
        assert str(down["last_error"]).startswith(f"{server.address}: ")
        await anyio.to_thread.run_sync(server.start)
        try:
            sent = await reaches(store, row, "sent")
            later = await add_mail(store)
            outbox.wake()
            await reaches(store, later, "sent")
        finally:
            await anyio.to_thread.run_sync(server.stop)
    assert len(server.recorder.copies(row["message_id"])) == 1
    assert sent["attempts"] > down["attempts"]
    assert outbox.failures == 0


async def test_a_4xx_answer_is_retried_and_a_5xx_refusal_is_final(
    store: Store, smtp: SmtpServer
) -> None:
    smtp.recorder.answers["busy@example.org"] = ["451 4.3.0 try later"] * 2
    smtp.recorder.answers["nobody@example.org"] = ["550 5.1.1 no such user"] * 5
    async with relaying(store, relay_of(smtp)) as outbox:
        busy = await add_mail(store, to="busy@example.org")
        nobody = await add_mail(store, to="nobody@example.org")
        outbox.wake()
        refused = await reaches(store, nobody, "bounced")
        sent = await reaches(store, busy, "sent")
        later = await add_mail(store)
        outbox.wake()
        await reaches(store, later, "sent")
    assert (sent["attempts"], sent["relay_answer"]) == (3, "250 2.0.0 queued as q1")
    assert sent["last_error"] == "not now: 451 4.3.0 try later"
    assert refused["relay_answer"] == "550 5.1.1 no such user"
    assert refused["last_error"] == "refused: 550 5.1.1 no such user"
    assert refused["attempts"] == 1
    assert (refused["bounce_source"], refused["bounce_status"]) == ("relay", "5.1.1")
    assert refused["bounce_diagnostic"] == "550 5.1.1 no such user"
    assert refused["body"] is None and refused["bounced_at"] >= refused["created_at"]
    # Asked once, never again; busy twice: three refusals in all.
    assert smtp.recorder.refused.count("550 5.1.1 no such user") == 1
    assert len(smtp.recorder.refused) == 3
    assert smtp.recorder.copies(nobody["message_id"]) == []
    assert len(smtp.recorder.copies(busy["message_id"])) == 1


async def test_a_mail_left_sending_is_sent_again_in_doubt_with_its_message_id(
    store: Store, smtp: SmtpServer
) -> None:
    row = await add_mail(store)
    await execute(  # what a hub killed mid-transaction leaves
        store, "UPDATE outbound_mail SET status = 'sending', attempts = 1 WHERE id = ?", row["id"]
    )
    async with relaying(store, relay_of(smtp)):
        sent = await reaches(store, row, "sent")
    (copy,) = smtp.recorder.copies(row["message_id"])
    assert copy.message_id == row["message_id"]
    assert (sent["in_doubt"], sent["attempts"]) == (1, 2)
    assert "may have this mail already" in str(sent["last_error"])


async def test_without_a_relay_mail_waits_as_no_relay_until_a_hub_with_one_starts(
    store: Store, smtp: SmtpServer
) -> None:
    row = await add_mail(store)  # pending: a hub with a relay wrote it
    async with relaying(store, None) as outbox:
        assert outbox.status == "no_relay"
        parked = await row_of(store, row["event_id"])
        assert (parked["status"], parked["attempts"]) == ("no_relay", 0)
        new = await add_mail(store, status=outbox.status)
    assert smtp.recorder.received == []
    async with relaying(store, relay_of(smtp)):
        await reaches(store, row, "sent")
        await reaches(store, new, "sent")
    assert len(smtp.recorder.received) == 2


async def test_login_from_the_environment_and_a_refused_login_is_retried_unlogged(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    server = SmtpServer(login=("relay-user", "s3cret-pass"))
    server.start()
    try:
        env = {"MAILRUN_SMTP_RELAY_USER": "relay-user", "MAILRUN_SMTP_RELAY_PASSWORD": "wrong-pw"}
        wrong = dataclasses.replace(relay_config(server.address, env), timeout=5.0)
        assert "wrong-pw" not in repr(wrong)
        caplog.set_level(logging.DEBUG, logger="mailrun")
        async with relaying(store, wrong) as outbox:
            row = await add_mail(store)
            outbox.wake()

            async def refused() -> bool:
                now = await row_of(store, row["event_id"])
                return now["attempts"] >= 2 and "535" in str(now["last_error"])

            await wait_for(refused, what="a refused login, retried")
        assert "wrong-pw" not in caplog.text
        assert server.recorder.received == []
        env["MAILRUN_SMTP_RELAY_PASSWORD"] = "s3cret-pass"
        async with relaying(store, relay_of(server, password="s3cret-pass", username="relay-user")):
            await reaches(store, row, "sent")
        assert len(server.recorder.copies(row["message_id"])) == 1
    finally:
        server.stop()


async def test_starttls_is_required_and_the_relay_is_verified_by_the_ca_file(
    tmp_path: Path, store: Store
) -> None:
    context, ca_file = self_signed(tmp_path)
    server = SmtpServer(tls=context)
    server.start()
    try:
        env = {"MAILRUN_SMTP_RELAY_STARTTLS": "1", "MAILRUN_SMTP_RELAY_CA_FILE": str(ca_file)}
        relay = dataclasses.replace(relay_config(server.address, env), timeout=5.0)
        assert (relay.starttls, relay.ca_file) == (True, str(ca_file))
        async with relaying(store, relay) as outbox:
            row = await add_mail(store)
            outbox.wake()
            await reaches(store, row, "sent")
        assert len(server.recorder.copies(row["message_id"])) == 1
        # Without the CA the relay's certificate is not trusted: nothing is sent.
        untrusted = dataclasses.replace(relay, ca_file=None)
        async with relaying(store, untrusted) as outbox:
            other = await add_mail(store)
            outbox.wake()

            async def refused() -> bool:
                now = await row_of(store, other["event_id"])
                return now["attempts"] >= 1 and "CERTIFICATE" in str(now["last_error"]).upper()

            await wait_for(refused, what="an untrusted relay certificate")
        assert len(server.recorder.received) == 1
    finally:
        server.stop()


def test_relay_settings_that_make_no_sense_are_refused() -> None:
    from hub._errors import RelayConfigError

    with pytest.raises(RelayConfigError, match="HOST:PORT"):
        relay_config("no-port", {})
    with pytest.raises(RelayConfigError, match="MAILRUN_SMTP_RELAY_STARTTLS"):
        relay_config("127.0.0.1:25", {"MAILRUN_SMTP_RELAY_STARTTLS": "maybe"})
    with pytest.raises(RelayConfigError, match="both"):
        relay_config("127.0.0.1:25", {"MAILRUN_SMTP_RELAY_USER": "u"})
    config = relay_config("[::1]:2525", {"MAILRUN_SMTP_RELAY_STARTTLS": "yes"})
    assert (config.host, config.port, config.starttls, config.address) == (
        "::1",
        2525,
        True,
        "[::1]:2525",
    )
