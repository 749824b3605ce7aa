"""``POST /mail`` routes as SMTP does (one accept path): ``to`` with a tag goes
to its base address, and ``in_reply_to`` / ``references`` naming mail a run
sent reach that run; a reply to an ended run under ``refuse`` is 409
``workflow_run_terminal`` and leaves nothing."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import msgspec
import pytest

from hub.store import OutboundMail, OutboundStatus, Tx, record_outbound
from runtime.wire import MailContext
from tests.support.store import execute, read_one

from ..harness import SOURCE, Api, api, assert_error

pytestmark = pytest.mark.anyio


def _record(tx: Tx, mail: OutboundMail) -> None:
    record_outbound(tx, [mail], OutboundStatus.SENT)


async def _asked(hub: Api, dep: dict[str, str], status: str) -> tuple[str, str]:
    """A child run of ``dep`` in ``status``, and the Message-ID of a mail it sent."""
    top = (await hub.send(dep["address"], message_id="first")).json()["run_id"]
    child = "run_" + "c" * 26
    await execute(
        hub.store,
        "INSERT INTO workflow_run (id, deployment_id, parent_run_id, status, is_top_level,"
        " is_anchor, entrypoint, created_at, updated_at) VALUES (?, ?, ?, ?, 0, 0, 'f:c', 1, 1)",
        child, dep["id"], top, status,
    )  # fmt: skip
    mail = OutboundMail(
        deployment_id=dep["id"], run_id=child, event_id="evt_" + "1" * 26,
        send_key="k", sender=dep["address"], recipient="h@example.com", subject="?", body=b"",
    )  # fmt: skip
    await hub.store.transact(partial(_record, mail=mail))
    found = await read_one(hub.store, "SELECT message_id FROM outbound_mail")
    assert found is not None
    return child, str(found[0])


async def _context(hub: Api, dispatch_id: str) -> MailContext:
    found = await read_one(
        hub.store, "SELECT context FROM workflow_run_dispatch WHERE id = ?", dispatch_id
    )
    assert found is not None
    return msgspec.msgpack.decode(bytes(found[0]), type=MailContext)


async def test_post_mail_routes_a_reply_to_the_child_with_its_tag_and_thread(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as hub:
        dep = await hub.deploy("orders")
        child, asked = await _asked(hub, dep, "running")
        to = "Orders+Q3@mailrun.local"
        r = await hub.send(to, references=["<old@x>", asked], message_id="reply")
        assert r.status_code == 202, r.text
        assert r.json()["run_id"] == child
        assert await _context(hub, r.json()["dispatch_id"]) == MailContext(
            to=to, tag="Q3", thread=["<old@x>", asked], routed_by="headers"
        )
        # A bare id is taken as <id>; one that names nothing leaves the mail plain.
        r = await hub.send(dep["address"], in_reply_to="nothing@x", message_id="plain")
        assert r.json()["run_id"] != child
        context = await _context(hub, r.json()["dispatch_id"])
        assert (context.in_reply_to, context.routed_by) == ("<nothing@x>", "")
        r = await hub.send(dep["address"], in_reply_to="<a@x>\r\nBcc: x@y")
        assert_error(r, 422, "invalid_mail")


async def test_post_mail_refuses_a_reply_to_an_ended_child_under_refuse(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep = await hub.deploy("orders")
        _, asked = await _asked(hub, dep, "failed")
        await execute(
            hub.store,
            "UPDATE deployment SET mail_settings = ? WHERE id = ?",
            '{"replies_to_ended":"refuse"}',
            dep["id"],
        )
        before = await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch")
        r = await hub.send(dep["address"], in_reply_to=asked)
        assert_error(r, 409, "workflow_run_terminal")
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == before


async def test_a_deployment_is_made_in_one_of_the_hubs_domains(tmp_path: Path) -> None:
    async with api(tmp_path, domains=("example.org",)) as hub:
        first = await hub.deploy("sales")
        other = await hub.deploy("support", source=SOURCE, domain="Example.ORG")
        assert (first["address"], other["address"]) == (
            "sales@mailrun.local",
            "support@example.org",
        )
        r = await hub.client.post(
            "/workflows/deployments", json={"name": "x", "source": SOURCE, "domain": "evil.com"}
        )
        assert_error(r, 422, "invalid_deployment")
        assert "evil.com" in r.json()["detail"]
        # Mail to each domain reaches its own deployment; a tag changes nothing.
        r = await hub.send("support+vip@example.org", message_id="m1")
        assert r.status_code == 202 and r.json()["deployment_id"] == other["id"]
        assert_error(await hub.send("support@mailrun.local"), 404, "unknown_address")
