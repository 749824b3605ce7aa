"""Where mail goes within a deployment, through the hub's SMTP ingress in one
process (a real store and acceptor, ``smtplib`` as the client): plus-addresses,
a domain's catch-all, replies by their headers and by a signed reply
address, and the deployment's policy for replies to a run that has ended.
What is proven is what the store holds: the dispatch, its run and its context."""

from __future__ import annotations

import dataclasses
import smtplib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from email.message import EmailMessage
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
import pytest

from hub import Acceptor, Store, bind_socket
from hub._errors import CatchAllTaken
from hub.mailbox import reply_address
from hub.smtp import SmtpServer, smtp_config
from hub.store import (
    OutboundMail,
    OutboundStatus,
    Tx,
    create_deployment,
    delete_deployment,
    open_store,
    record_outbound,
)
from hub.store.mail import REPLY_KEY, hub_secret, set_catch_all
from runtime.wire import MailContext
from tests.support.store import execute, read_one, rows

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
T = TypeVar("T")
DOMAIN = "mailrun.local"
SOURCE = "async def main(ctx, item): pass\n"


@dataclasses.dataclass
class Hub:
    store: Store
    server: SmtpServer
    deployments: dict[str, str]  # name -> id

    async def client(self, work: Callable[[smtplib.SMTP], T]) -> T:
        def run() -> T:
            with smtplib.SMTP("127.0.0.1", self.server.address.port, timeout=10) as smtp:
                return work(smtp)

        return await anyio.to_thread.run_sync(run)

    async def send(self, message: EmailMessage, to: str) -> Any:
        return await self.client(lambda s: s.send_message(message, to_addrs=[to]))

    async def dispatch(self, message_id: str) -> tuple[str, str, MailContext]:
        """The deployment, run and context of the mail ``message_id``."""
        found = await read_one(
            self.store,
            "SELECT deployment_id, run_id, context FROM workflow_run_dispatch WHERE message_id = ?",
            message_id,
        )
        assert found is not None, message_id
        context = msgspec.msgpack.decode(bytes(found[2]), type=MailContext)
        return str(found[0]), str(found[1]), context

    async def count(self) -> int:
        (found,) = await rows(self.store, "SELECT COUNT(*) FROM workflow_run_dispatch")
        return int(found[0])

    async def top_level(self, name: str) -> str:
        found = await read_one(
            self.store,
            "SELECT id FROM workflow_run WHERE deployment_id = ? AND is_top_level = 1",
            self.deployments[name],
        )
        assert found is not None
        return str(found[0])

    async def child(self, name: str, status: str = "running") -> str:
        """A child run of ``name``'s top-level run (as a spawn leaves it once started)."""
        run_id = "run_" + msgspec.json.encode(name).hex()[:4] + "c" * 22
        await execute(
            self.store,
            "INSERT INTO workflow_run (id, deployment_id, parent_run_id, status, is_top_level,"
            " is_anchor, entrypoint, created_at, updated_at) VALUES (?, ?, ?, ?, 0, 0, ?, 1, 1)",
            run_id, self.deployments[name], await self.top_level(name), status, "flow:child",
        )  # fmt: skip
        return run_id

    async def sent(self, name: str, run_id: str, event_id: str) -> tuple[str, str]:
        """A mail ``run_id`` sent out (an outbox row): its row id and Message-ID."""
        dep_id = self.deployments[name]
        mail = OutboundMail(
            deployment_id=dep_id, run_id=run_id, event_id=event_id, send_key=event_id,
            sender=f"{name}@{DOMAIN}", recipient="human@example.com", subject="question",
            body=b"yes or no?",
        )  # fmt: skip
        await self.store.transact(partial(_record, mail=mail))
        found = await read_one(
            self.store, "SELECT id, message_id FROM outbound_mail WHERE event_id = ?", event_id
        )
        assert found is not None
        return str(found[0]), str(found[1])

    async def reply_address(self, name: str, row_id: str) -> str:
        key = await self.store.transact(partial(hub_secret, name=REPLY_KEY))
        return reply_address(key, f"{name}@{DOMAIN}", row_id)


def _record(tx: Tx, mail: OutboundMail) -> None:
    record_outbound(tx, [mail], OutboundStatus.SENT)


@asynccontextmanager
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    config = dataclasses.replace(
        smtp_config("127.0.0.1:0", {}, allow_port_zero=True), hostname="mailrun.test"
    )
    async with await open_store(tmp_path / "hub.db") as store:
        deployments = {}
        for name in ("orders", "audit", "other"):
            created = await create_deployment(
                store, name=name, source=SOURCE, domain=DOMAIN,
                nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
            )  # fmt: skip
            deployments[name] = created.deployment_id
        acceptor = Acceptor(store)
        server = SmtpServer(
            config, bind_socket(config.host, 0), store=store, acceptor=acceptor, max_body=1 << 20
        )
        async with anyio.create_task_group() as tg:
            await tg.start(acceptor.run)
            await tg.start(server.run)
            found = Hub(store, server, deployments)
            # The top-level runs exist: mail to them mints them.
            for name in deployments:
                await found.send(mail(f"<first.{name}@example.com>"), f"{name}@{DOMAIN}")
            yield found
            tg.cancel_scope.cancel()


def mail(
    message_id: str, *, in_reply_to: str | None = None, references: str | None = None
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "Human <human@example.com>"
    message["Subject"] = "an answer"
    message["Message-ID"] = message_id
    if in_reply_to is not None:
        message["In-Reply-To"] = in_reply_to
    if references is not None:
        message["References"] = references
    message.set_content("yes")
    return message


async def test_a_plus_address_goes_to_its_base_with_its_tag(tmp_path: Path) -> None:
    async with hub(tmp_path) as h:
        await h.send(mail("<tagged@example.com>"), f"Orders+Invoices@{DOMAIN}")
        dep_id, run_id, context = await h.dispatch("<tagged@example.com>")
        assert (dep_id, run_id) == (h.deployments["orders"], await h.top_level("orders"))
        assert context == MailContext(to=f"Orders+Invoices@{DOMAIN}", tag="Invoices")
        # No deployment at the base: refused at RCPT, whatever the tag; nothing stored.
        before = await h.count()
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            await h.send(mail("<lost@example.com>"), f"nobody+x@{DOMAIN}")
        code, answer = refused.value.recipients[f"nobody+x@{DOMAIN}"]
        assert code == 550 and answer.startswith(b"5.1.1")
        assert await h.count() == before


async def test_a_catch_all_takes_the_unknown_addresses_of_its_domain(tmp_path: Path) -> None:
    async with hub(tmp_path) as h:
        audit = h.deployments["audit"]
        assert await h.store.transact(partial(set_catch_all, deployment_id=audit, on=True)) == (
            DOMAIN
        )
        with pytest.raises(CatchAllTaken):
            await h.store.transact(
                partial(set_catch_all, deployment_id=h.deployments["orders"], on=True)
            )
        await h.send(mail("<stray@example.com>"), f"Sales+eu@{DOMAIN}")
        dep_id, run_id, context = await h.dispatch("<stray@example.com>")
        assert (dep_id, run_id) == (audit, await h.top_level("audit"))
        assert context == MailContext(to=f"Sales+eu@{DOMAIN}", tag="eu", routed_by="catch_all")
        # A deployment's own address is its own, catch-all or not.
        await h.send(mail("<own@example.com>"), f"orders@{DOMAIN}")
        assert (await h.dispatch("<own@example.com>"))[0] == h.deployments["orders"]
        # A deleted deployment's address is nobody's: the catch-all takes it.
        await delete_deployment(h.store, h.deployments["other"])
        await h.send(mail("<orphan@example.com>"), f"other@{DOMAIN}")
        assert (await h.dispatch("<orphan@example.com>"))[0] == audit
        # Off again: unknown addresses are refused at RCPT.
        await h.store.transact(partial(set_catch_all, deployment_id=audit, on=False))
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            await h.send(mail("<late@example.com>"), f"sales@{DOMAIN}")


async def test_a_reply_goes_to_the_child_that_sent_the_mail(tmp_path: Path) -> None:
    async with hub(tmp_path) as h:
        child = await h.child("orders")
        _, asked = await h.sent("orders", child, "evt_" + "1" * 26)
        _, earlier = await h.sent("orders", await h.top_level("orders"), "evt_" + "2" * 26)

        # In-Reply-To names the child's mail; the thread is References then it.
        await h.send(
            mail("<r1@example.com>", in_reply_to=asked, references=f"{earlier} {asked}"),
            f"orders@{DOMAIN}",
        )
        _, run_id, context = await h.dispatch("<r1@example.com>")
        assert run_id == child
        assert context == MailContext(
            to=f"orders@{DOMAIN}", in_reply_to=asked, thread=[earlier, asked], routed_by="headers"
        )
        # References alone, newest first: a client that dropped In-Reply-To.
        await h.send(mail("<r2@example.com>", references=f"{earlier} {asked}"), f"orders@{DOMAIN}")
        assert (await h.dispatch("<r2@example.com>"))[1] == child
        # A Message-ID another deployment's run sent routes nothing here.
        _, foreign = await h.sent("audit", await h.top_level("audit"), "evt_" + "3" * 26)
        await h.send(mail("<r3@example.com>", in_reply_to=foreign), f"orders@{DOMAIN}")
        _, run_id, context = await h.dispatch("<r3@example.com>")
        assert (run_id, context.routed_by, context.thread) == (
            await h.top_level("orders"),
            "",
            [foreign],
        )


async def test_the_reply_address_alone_finds_the_child_and_a_forged_one_is_plain_mail(
    tmp_path: Path,
) -> None:
    async with hub(tmp_path) as h:
        child = await h.child("orders")
        row_id, asked = await h.sent("orders", child, "evt_" + "1" * 26)
        address = await h.reply_address("orders", row_id)
        await h.send(mail("<t1@example.com>"), address)
        _, run_id, context = await h.dispatch("<t1@example.com>")
        assert run_id == child
        assert context == MailContext(to=address, in_reply_to=asked, routed_by="reply_address")

        # One digit of the MAC changed: not a token this hub signed.
        name, _, domain = address.partition("@")
        forged = name[:-1] + ("0" if name[-1] != "0" else "1") + "@" + domain
        await h.send(mail("<t2@example.com>"), forged)
        _, run_id, context = await h.dispatch("<t2@example.com>")
        assert run_id == await h.top_level("orders")
        assert (context.tag, context.routed_by) == (forged.partition("+")[2].partition("@")[0], "")
        # A token signed for another deployment's address is no token here.
        other = (await h.reply_address("audit", row_id)).replace("audit+", "orders+")
        await h.send(mail("<t3@example.com>"), other)
        assert (await h.dispatch("<t3@example.com>"))[1] == await h.top_level("orders")


@pytest.mark.parametrize("policy", ["top_level", "refuse"])
async def test_a_reply_to_an_ended_child_meets_the_deployments_policy(
    tmp_path: Path, policy: str
) -> None:
    async with hub(tmp_path) as h:
        child = await h.child("orders", status="completed")
        row_id, asked = await h.sent("orders", child, "evt_" + "1" * 26)
        if policy == "refuse":
            await execute(
                h.store,
                "UPDATE deployment SET mail_settings = ? WHERE id = ?",
                '{"replies_to_ended":"refuse"}',
                h.deployments["orders"],
            )
        before = await h.count()
        by_headers = mail("<e1@example.com>", in_reply_to=asked)
        by_address = mail("<e2@example.com>")
        if policy == "top_level":
            await h.send(by_headers, f"orders@{DOMAIN}")
            await h.send(by_address, await h.reply_address("orders", row_id))
            top = await h.top_level("orders")
            for message_id in ("<e1@example.com>", "<e2@example.com>"):
                _, run_id, context = await h.dispatch(message_id)
                assert (run_id, context.in_reply_to, context.routed_by) == (top, asked, "")
            return
        for message, to in (
            (by_headers, f"orders@{DOMAIN}"),
            (by_address, await h.reply_address("orders", row_id)),
        ):
            with pytest.raises(smtplib.SMTPDataError) as refused:
                await h.send(message, to)
            assert refused.value.smtp_code == 550
            assert refused.value.smtp_error.startswith(b"5.2.1")
            assert b"workflow_run_terminal" in refused.value.smtp_error
        assert await h.count() == before
