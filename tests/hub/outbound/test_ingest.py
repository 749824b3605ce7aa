"""Mail a run sends to an outside address becomes one outbound row, in the
transaction that ingests its event, however often that event (or the same
mail from a re-processed dispatch) comes; its rich parts and Message-ID are
kept, and what can never be sent is recorded failed."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from hub.store import OutboundSpec, OutboundStatus, decode_spec
from runtime import EventsAck, MailSent, new_id
from runtime.wire import Attachment
from tests.support.harnesses.wire import Hub, deploy, owned, running_hub, send

pytestmark = pytest.mark.anyio

OUTSIDE = "someone@example.org"


class Sink:
    """An outbox that counts its wakeups."""

    def __init__(self, status: OutboundStatus) -> None:
        self.status = status
        self.woken = 0

    def wake(self) -> None:
        self.woken += 1


def mail_of(run_id: str, dispatch_id: str, index: int = 1, to: str = OUTSIDE) -> MailSent:
    return MailSent(
        event_id=new_id("evt"),
        run_id=run_id,
        to=to,
        subject=f"hello {index}",
        body=b"body",
        message_id=f"{dispatch_id}:mail:{index}",
    )


async def rows(hub: Hub) -> list[dict[str, object]]:
    found = await hub.all("SELECT * FROM outbound_mail ORDER BY rowid")
    return [dict(r) for r in found]


async def test_an_outside_address_is_one_row_however_often_its_mail_comes(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1, "sender")
        target = await deploy(hub.store, "target")
        away = mail_of(r1.run_id, r1.dispatch_id)
        local = mail_of(r1.run_id, r1.dispatch_id, 2, to=target.address)
        for _ in range(2):  # a resent frame (its ack was lost)
            ack = await send(car, away, local)
            assert isinstance(ack, EventsAck) and ack.ids == [away.event_id, local.event_id]
        # The same mail again from a new owner processing that dispatch again:
        # a new event id, the same message id.
        again = msgspec.structs.replace(away, event_id=new_id("evt"))
        assert isinstance(await send(car, again), EventsAck)

        (row,) = await rows(hub)
        assert row["event_id"] == away.event_id
        assert row["message_id"] == f"<{away.event_id}@mailrun.local>"
        assert (row["deployment_id"], row["run_id"]) == (car.dep.id, r1.run_id)
        assert (row["sender"], row["recipient"], row["subject"], row["body"]) == (
            car.dep.address,
            OUTSIDE,
            "hello 1",
            b"body",
        )
        # No relay here: visible, never dropped.
        assert (row["status"], row["attempts"], row["in_doubt"]) == ("no_relay", 0, 0)
        # Local mail is a dispatch as before, and never an outbound row.
        dispatches = await hub.all(
            "SELECT subject FROM workflow_run_dispatch WHERE deployment_id = ?", target.id
        )
        assert [d["subject"] for d in dispatches] == ["hello 2"]


async def test_with_a_relay_rows_are_pending_and_the_outbox_is_woken_once_per_new_mail(
    tmp_path: Path,
) -> None:
    sink = Sink(OutboundStatus.PENDING)
    async with running_hub(tmp_path, outbox=sink) as hub:
        car, (r1,) = await owned(hub, 1)
        first = mail_of(r1.run_id, r1.dispatch_id)
        assert isinstance(await send(car, first), EventsAck)
        assert sink.woken == 1
        assert isinstance(await send(car, first), EventsAck)  # nothing new: no wakeup
        assert sink.woken == 1
        second = mail_of(r1.run_id, r1.dispatch_id, 2, to="Other@Example.org ")
        assert isinstance(await send(car, second), EventsAck)
        assert sink.woken == 2
        found = await rows(hub)
        assert [(r["recipient"], r["status"]) for r in found] == [
            (OUTSIDE, "pending"),
            ("Other@Example.org", "pending"),
        ]


@pytest.mark.parametrize(
    ("to", "subject", "why"),
    [
        ("not an address", "s", "invalid_address"),
        ("a@b.c, d@e.f", "s", "invalid_address"),
        ("Someone <a@b.c>", "s", "invalid_address"),
        (OUTSIDE, "two\r\nlines", "invalid_mail"),
    ],
)
async def test_a_mail_no_relay_could_take_is_recorded_failed(
    tmp_path: Path, to: str, subject: str, why: str
) -> None:
    sink = Sink(OutboundStatus.PENDING)
    async with running_hub(tmp_path, outbox=sink) as hub:
        car, (r1,) = await owned(hub, 1)
        mail = MailSent(event_id=new_id("evt"), run_id=r1.run_id, to=to, subject=subject)
        assert isinstance(await send(car, mail), EventsAck)
        (row,) = await rows(hub)
        assert row["status"] == "failed"
        assert str(row["last_error"]).startswith(f"{why}: ")


async def test_the_rich_parts_and_the_message_id_the_sidecar_made_are_kept(
    tmp_path: Path,
) -> None:
    sink = Sink(OutboundStatus.PENDING)
    async with running_hub(tmp_path, outbox=sink) as hub:
        car, (r1,) = await owned(hub, 1)
        pdf = Attachment(filename="a.pdf", content_type="application/pdf", data=b"%PDF")
        rich = msgspec.structs.replace(
            mail_of(r1.run_id, r1.dispatch_id),
            header_id=f"<{r1.dispatch_id}.1@mailrun.local>",
            html="<p>hi</p>",
            cc=["bob@example.org"],
            in_reply_to="<q@example.org>",
            references=["<p@example.org>", "<q@example.org>"],
            headers={"X-Order": "7"},
            attachments=[pdf],
        )
        plain = mail_of(r1.run_id, r1.dispatch_id, 2)
        assert isinstance(await send(car, rich, plain), EventsAck)
        first, second = await rows(hub)
    assert first["message_id"] == f"<{r1.dispatch_id}.1@mailrun.local>"
    assert first["status"] == "pending"
    assert decode_spec(first["spec"]) == OutboundSpec(
        html="<p>hi</p>",
        cc=("bob@example.org",),
        in_reply_to="<q@example.org>",
        references=("<p@example.org>", "<q@example.org>"),
        headers={"X-Order": "7"},
        attachments=(pdf,),
    )
    # No rich part, no header id (an older sidecar): NULL, and the event's id.
    assert second["spec"] is None
    assert second["message_id"] == f"<{plain.event_id}@mailrun.local>"


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"headers": {"Bcc": "x@example.org"}}, "invalid_mail: header 'Bcc' is one the hub writes"),
        ({"headers": {"X-A": "1\r\nBcc: x@example.org"}}, "invalid_mail: header 'X-A'"),
        ({"cc": ["two@a.b, three@c.d"]}, "invalid_address: Cc"),
        ({"header_id": "<two\r\nlines@x>"}, "invalid_mail: Message-ID"),
    ],
)
async def test_rich_parts_that_can_never_be_sent_are_recorded_failed(
    tmp_path: Path, changes: dict[str, object], why: str
) -> None:
    sink = Sink(OutboundStatus.PENDING)
    async with running_hub(tmp_path, outbox=sink) as hub:
        car, (r1,) = await owned(hub, 1)
        mail = msgspec.structs.replace(mail_of(r1.run_id, r1.dispatch_id), **changes)
        assert isinstance(await send(car, mail), EventsAck)
        (row,) = await rows(hub)
    assert row["status"] == "failed"
    assert str(row["last_error"]).startswith(why), row["last_error"]
    assert row["attempts"] == 0
