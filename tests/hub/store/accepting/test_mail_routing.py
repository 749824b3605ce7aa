"""Mail routing in the accepting transaction, on SQLite and PostgreSQL: one
batch with a plus-address, a catch-all's mail, a reply by its headers, one
by its reply token and a forged token; the catch-all kept one per domain; a
reply to an ended run refused under ``refuse``."""

from __future__ import annotations

from functools import partial

import msgspec
import pytest

from hub import Accepted, Rejected, Trigger
from hub._errors import CatchAllTaken
from hub.intake import mail_trigger
from hub.mailbox import reply_address
from hub.store import OutboundMail, OutboundStatus, Store, Tx, record_outbound
from hub.store.mail import REPLY_KEY, hub_secret, set_catch_all
from hub.store.sql import sql
from runtime.wire import IngressMail, MailContext
from tests.support.store import execute, read_one

from .test_accept import deploy, running

pytestmark = pytest.mark.anyio
_ROW = sql("SELECT id, message_id FROM outbound_mail WHERE event_id = ?")


def _record(tx: Tx, mail: OutboundMail) -> tuple[str, str, bytes]:
    """The mail recorded as sent: its row id, its Message-ID, and the reply key."""
    record_outbound(tx, [mail], OutboundStatus.SENT)
    row = tx.fetch_one(_ROW, (mail.event_id,))
    assert row is not None
    return str(row[0]), str(row[1]), hub_secret(tx, REPLY_KEY)


async def _context(store: Store, dispatch_id: str) -> MailContext:
    found = await read_one(
        store, "SELECT context FROM workflow_run_dispatch WHERE id = ?", dispatch_id
    )
    assert found is not None
    return msgspec.msgpack.decode(bytes(found[0]), type=MailContext)


def mail(to: str, message_id: str, references: tuple[str, ...] = ()) -> Trigger:
    ingress = IngressMail(to=to, message_id=message_id, references=list(references))
    return mail_trigger(ingress, max_body=1 << 20)


async def test_one_batch_routes_each_mail_its_own_way(database: str) -> None:
    async with running(database) as (store, acceptor):
        orders, audit = await deploy(store, "orders"), await deploy(store, "audit")
        (top,) = [await acceptor.accept(mail("orders@mailrun.local", "m0"))]
        assert isinstance(top, Accepted)
        child = "run_" + "c" * 26
        await execute(
            store,
            "INSERT INTO workflow_run (id, deployment_id, parent_run_id, status, is_top_level,"
            " is_anchor, entrypoint, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, 0, 0, 'f:c', 1, 1)",
            child, orders, top.run_id, "running",
        )  # fmt: skip
        sent = OutboundMail(
            deployment_id=orders, run_id=child, event_id="evt_" + "1" * 26, send_key="k",
            sender="orders@mailrun.local", recipient="h@example.com", subject="?", body=b"",
        )  # fmt: skip
        row_id, asked, key = await store.transact(partial(_record, mail=sent))
        assert await store.transact(partial(set_catch_all, deployment_id=audit, on=True))
        with pytest.raises(CatchAllTaken):
            await store.transact(partial(set_catch_all, deployment_id=orders, on=True))

        token = reply_address(key, "orders@mailrun.local", row_id)
        name = token.partition("@")[0]  # its MAC's last digit changed
        forged = name[:-1] + ("0" if name[-1] != "0" else "1") + "@mailrun.local"
        triggers = [
            mail("orders+vip@mailrun.local", "m1"),
            mail("sales@mailrun.local", "m2"),
            mail("orders@mailrun.local", "m3", references=("<x@y>", asked)),
            mail(token, "m4"),
            mail(forged, "m5"),
        ]
        outcomes = await acceptor.accept_many(triggers)
        assert all(isinstance(o, Accepted) for o in outcomes), outcomes
        got = [
            (o.deployment_id, o.run_id, await _context(store, o.dispatch_id))
            for o in outcomes
            if isinstance(o, Accepted)
        ]
        audit_top = got[1][1]
        assert got == [
            (orders, top.run_id, MailContext(to="orders+vip@mailrun.local", tag="vip")),
            (audit, audit_top, MailContext(to="sales@mailrun.local", routed_by="catch_all")),
            (orders, child, MailContext(
                to="orders@mailrun.local", thread=["<x@y>", asked], routed_by="headers"
            )),
            (orders, child, MailContext(to=token, in_reply_to=asked, routed_by="reply_address")),
            (orders, top.run_id, MailContext(to=forged, tag=forged[7:-14])),
        ]  # fmt: skip

        # The child ended; the deployment refuses replies to ended runs.
        await execute(store, "UPDATE workflow_run SET status = 'completed' WHERE id = ?", child)
        await execute(
            store,
            "UPDATE deployment SET mail_settings = ? WHERE id = ?",
            '{"replies_to_ended":"refuse"}',
            orders,
        )
        late = await acceptor.accept_many([mail(token, "m6")])
        assert isinstance(late[0], Rejected) and late[0].reason == "workflow_run_terminal"
