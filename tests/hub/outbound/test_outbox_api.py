"""``GET /outbox``, ``mailrun outbox``'s table and the outbound gauge in ``/metrics``."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from hub.cli.tables import outbox_table
from hub.store import (
    SOURCE_RELAY,
    OutboundMail,
    OutboundStatus,
    Store,
    mark_bounced,
    record_outbound,
)
from runtime import new_id
from tests.hub.api.harness import Api, api, assert_error
from tests.support.store import execute

pytestmark = pytest.mark.anyio


async def add(store: Store, dep: dict[str, str], to: str, status: OutboundStatus) -> str:
    event_id = new_id("evt")
    mail = OutboundMail(
        deployment_id=dep["id"], run_id=new_id("run"), event_id=event_id, send_key=event_id,
        sender=dep["address"], recipient=to, subject=f"to {to}", body=b"secret body",
    )  # fmt: skip
    assert await store.transact(partial(record_outbound, mails=[mail], status=status)) == 1
    return event_id


async def outbox(a: Api, query: str = "") -> list[dict[str, object]]:
    r = await a.client.get(f"/outbox{query}")
    assert r.status_code == 200, r.text
    return list(r.json()["outbox"])


async def test_outgoing_mail_is_listed_with_its_status_and_never_its_body(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        one, two = await a.deploy("one"), await a.deploy("two")
        first = await add(a.store, one, "a@example.org", OutboundStatus.NO_RELAY)
        await add(a.store, one, "b@example.org", OutboundStatus.PENDING)
        await add(a.store, two, "c@example.org", OutboundStatus.NO_RELAY)

        listed = await outbox(a)
        assert [m["to"] for m in listed] == ["a@example.org", "b@example.org", "c@example.org"]
        shown = listed[0]
        assert shown["event_id"] == first
        assert shown["message_id"] == f"<{first}@mailrun.local>"
        assert (shown["deployment_id"], shown["sender"]) == (one["id"], one["address"])
        assert (shown["status"], shown["attempts"], shown["in_doubt"]) == ("no_relay", 0, False)
        assert (shown["relay_answer"], shown["sent_at"], shown["next_attempt_at"]) == (
            None,
            None,
            None,
        )
        assert shown["body_size"] == len(b"secret body")
        assert "body" not in shown
        assert "secret body" not in (await a.client.get("/outbox")).text

        no_relay = await outbox(a, "?status=no_relay")
        assert [m["to"] for m in no_relay] == ["a@example.org", "c@example.org"]
        assert [m["to"] for m in await outbox(a, "?deployment=one")] == [
            "a@example.org",
            "b@example.org",
        ]
        by_id = await outbox(a, f"?deployment={two['id']}&status=no_relay")
        assert [m["to"] for m in by_id] == ["c@example.org"]
        assert [m["to"] for m in await outbox(a, "?limit=1")] == ["c@example.org"]
        assert await outbox(a, "?status=sent") == []

        assert_error(await a.client.get("/outbox?status=lost"), 422, "invalid_request")
        assert_error(await a.client.get("/outbox?limit=0"), 422, "invalid_request")
        assert_error(await a.client.get("/outbox?deployment=nobody"), 404, "unknown_deployment")
        assert_error(await a.anonymous.get("/outbox"), 401, "unauthorized")

        metrics = (await a.client.get("/metrics")).text
        assert 'mailrun_outbound_mail{status="no_relay"} 2' in metrics
        assert 'mailrun_outbound_mail{status="pending"} 1' in metrics
        assert 'mailrun_outbound_mail{status="sent"} 0' in metrics

        table = outbox_table(listed).splitlines()
        assert table[0].split()[:4] == ["ID", "TO", "SUBJECT", "STATUS"]
        assert "a@example.org" in table[1] and "no_relay" in table[1]


async def test_a_bounced_mail_is_listed_with_its_bounce(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("one")
        event_id = await add(a.store, dep, "gone@example.org", OutboundStatus.PENDING)
        await execute(
            a.store, "UPDATE outbound_mail SET status = 'sending' WHERE event_id = ?", event_id
        )
        (row_id,) = [m["id"] for m in await outbox(a)]
        answer = "550 5.1.1 <gone@example.org>: mailbox unknown"
        bounced = await mark_bounced(
            a.store, str(row_id), source=SOURCE_RELAY, status="5.1.1", diagnostic=answer
        )
        assert bounced is not None and not bounced.delivered  # its run is no run of the store
        (shown,) = await outbox(a, "?status=bounced")
        assert (shown["status"], shown["bounce_source"], shown["bounce_status"]) == (
            "bounced",
            "relay",
            "5.1.1",
        )
        assert shown["bounce_diagnostic"] == shown["relay_answer"] == answer
        assert shown["bounced_at"] >= shown["created_at"]
        assert shown["next_attempt_at"] is None
        assert 'mailrun_outbound_mail{status="bounced"} 1' in (await a.client.get("/metrics")).text
        (line,) = outbox_table([shown]).splitlines()[1:]
        assert "bounced" in line and "relay 5.1.1: 550 5.1.1" in line
