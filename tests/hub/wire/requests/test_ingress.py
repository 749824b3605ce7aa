"""The NATS mail ingress of a real hub (``serve_hub``) on a real nats-server
with nkey auth: a producer's batch is answered as ``POST /mail/batch``
answers it, and a producer the hub does not know (or removed) is refused.

The server's config is the test's (``tests.support.servers.identities``): it admits
producers the hub never heard of, or keeps one the hub removed, which is
how the hub's own check is seen apart from the server's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from hub import (
    HubSettings,
    IngressClient,
    IngressRefused,
    IngressUnavailable,
    ingress_mail,
    serve_hub,
)
from hub.natsauth import HUB_SEED_FILE, UserKey, new_user_key
from hub.store import Store
from hub.wire import RetentionConfig, WireConfig
from runtime import FrameDecoder, ProcessSettings, Reason, Refused, Subjects, encode, new_id
from runtime.testing import configure_failpoints
from runtime.wire import IngressBatch, IngressMail, IngressReceipts
from tests.support import wait_for
from tests.support.servers.identities import AuthorizedServer, admitted, authorized_server, peer
from tests.support.store import read_one

# slow: every test runs a hub and producers with NATS identities on a real nats-server
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOKEN = "admin-token-of-the-ingress-tests-0123"
MAX_BODY = 1024
SOURCE = "async def main(ctx, item):\n    pass\n"
_REFUSED: FrameDecoder[Refused] = FrameDecoder(Refused)


@dataclass
class Hub:
    auth: AuthorizedServer
    http: httpx.AsyncClient
    store: Store

    async def deploy(self, name: str) -> dict[str, Any]:
        r = await self.http.post("/workflows/deployments", json={"name": name, "source": SOURCE})
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def add_producer(self, name: str) -> tuple[dict[str, Any], UserKey]:
        """A producer added at the hub and admitted by the server (as `up` would)."""
        r = await self.http.post("/producers", json={"name": name})
        assert r.status_code == 201, r.text
        added = dict(r.json())
        key = UserKey(added.pop("seed"), added["nats_user"])
        await self.auth.admit_producer(added["id"], key)
        return added, key

    @asynccontextmanager
    async def producer(self, producer_id: str, key: UserKey) -> AsyncIterator[IngressClient]:
        with anyio.fail_after(60):  # bounds the connect: it retries while refused
            async with IngressClient.connect(
                self.auth.server.url, producer_id=producer_id, seed=key.seed, backoff_max=0.05
            ) as client:
                yield client

    async def dispatches(self) -> int:
        row = await read_one(self.store, "SELECT COUNT(*) FROM workflow_run_dispatch")
        assert row is not None
        return int(row[0])


@asynccontextmanager
async def running_hub(tmp_path: Path, wire: WireConfig | None = None) -> AsyncIterator[Hub]:
    async with authorized_server(tmp_path) as auth:
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        (state / HUB_SEED_FILE).write_text(auth.hub.seed + "\n")
        (state / HUB_SEED_FILE).chmod(0o600)
        config = HubSettings(
            state_dir=state,
            http_port=0,
            nats_url=auth.server.url,
            max_body=MAX_BODY,
            admin_token=TOKEN,
            process=ProcessSettings(backoff_max=0.05),
            **({"wire": wire} if wire is not None else {}),
        )
        async with anyio.create_task_group() as tg:
            handle = await tg.start(serve_hub, config)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(base_url=handle.http_url, headers=headers) as http:
                yield Hub(auth, http, handle.store)
            tg.cancel_scope.cancel()


MAILS: list[dict[str, Any]] = [
    {"to": "one@mailrun.local", "subject": "a", "body": "body of a", "message_id": "<a@x>"},
    {"to": "two@mailrun.local", "subject": "b", "body": "body of b"},
    {"to": "nobody@mailrun.local", "subject": "c"},  # unknown_address
    {"to": "not an address", "subject": "d"},  # invalid_mail
    {"to": "one@mailrun.local", "subject": "e", "body": "x" * (MAX_BODY + 1)},  # too big
    {"to": "one@mailrun.local", "subject": "f", "message_id": "start:run_1"},  # reserved id
    {"to": "one@mailrun.local", "subject": "g", "body": "g", "body_b64": "Zw=="},  # both
    {"to": "one@mailrun.local", "subject": "a", "body": "other", "message_id": "<a@x>"},  # reused
    {"to": "one@mailrun.local", "subject": "h", "body_b64": "/w=="},  # a binary body
]
MALFORMED = {"subject": "no recipient"}


def as_ingress(mail: dict[str, Any]) -> IngressMail:
    return msgspec.convert(mail, IngressMail)


async def test_a_batch_is_answered_as_post_mail_batch_answers_it(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        one, two = await hub.deploy("one"), await hub.deploy("two")
        r = await hub.http.post("/mail/batch", json={"mails": [*MAILS, MALFORMED]})
        assert r.status_code == 200, r.text
        over_http = r.json()["receipts"]
        added, key = await hub.add_producer("orders")
        assert added["subject"] == Subjects().ingress(added["id"])
        async with hub.producer(added["id"], key) as client:
            batch = [as_ingress(m) for m in MAILS]
            # A mail that does not decode is that mail's error, as over HTTP.
            receipts = await client.send([*batch, msgspec.convert(MALFORMED, _Loose)])
            again = await client.send(batch)
        over_nats = [msgspec.to_builtins(x) for x in receipts]
        statuses = [(x["status"], x.get("reason")) for x in over_nats]
        assert statuses == [(x["status"], x.get("reason")) for x in over_http]
        assert statuses == [
            ("accepted", None),
            ("accepted", None),
            ("rejected", "unknown_address"),
            ("error", "invalid_mail"),
            ("rejected", "payload_too_large"),
            ("error", "invalid_mail"),
            ("error", "invalid_mail"),
            ("rejected", "message_id_reused"),
            ("accepted", None),
            ("error", "invalid_mail"),
        ]
        # The same answers, key for key; a mail with a message id is the one
        # HTTP accepted, a mail without one is a new dispatch after it.
        assert over_nats[0] == {**over_http[0], "duplicate": True}
        for fresh in (1, 8):
            assert over_nats[fresh]["seq"] == over_http[fresh]["seq"] + 1
            assert over_nats[fresh]["dispatch_id"] != over_http[fresh]["dispatch_id"]
            same = ("status", "run_id", "deployment_id", "duplicate")
            assert {k: over_nats[fresh][k] for k in same} == {k: over_http[fresh][k] for k in same}
        for error in (2, 3, 4, 5, 6, 7):
            assert over_nats[error] == over_http[error]
        assert set(over_nats[9]) == {"status", "reason", "detail"} and over_nats[9]["detail"]
        assert (over_nats[0]["deployment_id"], over_nats[1]["deployment_id"]) == (
            one["id"],
            two["id"],
        )
        # A retry of the batch: the mail with a message id gets its receipt again.
        assert msgspec.to_builtins(again[0]) == over_nats[0]
        assert [x.accepted for x in again] == [x.accepted for x in receipts[:-1]]
        # 3 over HTTP (a, b, h), then b and h over NATS, twice: a was a duplicate.
        assert await hub.dispatches() == 7


class _Loose(msgspec.Struct, omit_defaults=True):
    """A mail without a recipient: what a careless producer might encode."""

    subject: str = ""


async def test_a_batch_refused_whole(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        await hub.deploy("one")
        added, key = await hub.add_producer("orders")
        async with hub.producer(added["id"], key) as client:
            for mails in ([], [ingress_mail("one@mailrun.local", f"m{i}") for i in range(501)]):
                with pytest.raises(IngressRefused) as refused:
                    await client.send(mails)
                assert refused.value.reason == Reason.INVALID_REQUEST
            # Not a frame at all: answered decode_error, kept as a dead letter.
            async with peer(
                hub.auth.server.url, key.seed, inbox_prefix=Subjects.inbox_prefix(added["id"])
            ) as raw:
                answer = await raw.client.request(client.subject, b"\x93garbage", timeout=10)
            assert _REFUSED.decode(answer.data).reason == Reason.DECODE_ERROR
            letters = await read_one(
                hub.store,
                "SELECT COUNT(*) FROM dead_letter WHERE source = 'ingress' AND deployment_id = ?",
                added["id"],
            )
            assert letters is not None and letters[0] == 1
            receipts = await client.send([ingress_mail("one@mailrun.local", "fine")])
            assert [x.status for x in receipts] == ["accepted"]
        assert await hub.dispatches() == 1


async def test_garbage_past_its_rate_is_counted_in_the_hubs_metrics(tmp_path: Path) -> None:
    # The ingress keeps dead letters with the wire side's keeper: one table,
    # one set of caps, and what it drops shows in /metrics.
    retention = RetentionConfig(dead_letter_burst=1, dead_letter_rate=0.001)
    async with running_hub(tmp_path, WireConfig(retention=retention)) as hub:
        added, key = await hub.add_producer("orders")
        inbox = Subjects.inbox_prefix(added["id"])
        # The client waits until the server admits the new identity.
        async with (
            hub.producer(added["id"], key) as client,
            peer(hub.auth.server.url, key.seed, inbox_prefix=inbox) as raw,
        ):
            for _ in range(3):
                answer = await raw.client.request(client.subject, b"\x93garbage", timeout=10)
                assert _REFUSED.decode(answer.data).reason == Reason.DECODE_ERROR
        kept = await read_one(
            hub.store, "SELECT COUNT(*) FROM dead_letter WHERE source = 'ingress'"
        )
        assert kept is not None and kept[0] == 1
        metrics = (await hub.http.get("/metrics")).text
        assert 'mailrun_dead_letters_dropped_total{why="rate_limit"} 2' in metrics


async def test_a_producer_the_hub_does_not_know_or_removed_is_refused(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        await hub.deploy("one")
        mails = [ingress_mail("one@mailrun.local", "m", message_id="m-1")]
        # Admitted by the server, never added at the hub.
        stranger, stranger_key = new_id("prd"), new_user_key()
        await hub.auth.admit_producer(stranger, stranger_key)
        async with hub.producer(stranger, stranger_key) as client:
            with pytest.raises(IngressRefused) as refused:
                await client.send(mails)
            assert refused.value.reason == Reason.UNKNOWN_PRODUCER
        # Added, then removed at the hub while the server still admits it.
        added, key = await hub.add_producer("orders")
        async with hub.producer(added["id"], key) as client:
            assert [x.status for x in await client.send(mails)] == ["accepted"]
            r = await hub.http.delete(f"/producers/{added['name']}")
            assert r.status_code == 200 and r.json()["status"] == "removed", r.text
            with pytest.raises(IngressRefused) as refused:
                await client.send(mails)
            assert refused.value.reason == Reason.UNKNOWN_PRODUCER
        assert await hub.dispatches() == 1


async def test_a_request_answered_elsewhere_than_its_producers_inbox_is_dropped(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        await hub.deploy("one")
        added, key = await hub.add_producer("orders")
        subject = Subjects().ingress(added["id"])
        # Without a message id: had the first been served, this would be a second dispatch.
        mail = msgspec.msgpack.encode(ingress_mail("one@mailrun.local", "no id"))
        batch = encode(IngressBatch(mails=[msgspec.Raw(mail)]))
        url = hub.auth.server.url
        await wait_for(lambda: admitted(url, key.seed), what="the producer admitted")
        async with peer(url, key.seed, inbox_prefix=Subjects.inbox_prefix(added["id"])) as producer:
            # Its reply names a sidecar's inbox: the hub neither serves nor answers it.
            await producer.client.publish(subject, batch, reply=f"_INBOX_{new_id('dep')}.x")
            # Served in order after it, this one proves the first was seen and dropped.
            answer = await producer.client.request(subject, batch, timeout=10)
        [receipt] = FrameDecoder(IngressReceipts).decode(answer.data).receipts
        assert (receipt.status, receipt.seq) == ("accepted", 1)
        assert await hub.dispatches() == 1


async def test_no_hub_serving_is_no_answer(tmp_path: Path) -> None:
    async with authorized_server(tmp_path, producers=1) as auth:
        [producer] = auth.producers
        async with IngressClient.connect(
            auth.server.url, producer_id=producer, seed=auth.producers[producer].seed, timeout=2
        ) as client:
            with pytest.raises(IngressUnavailable):
                await client.send([ingress_mail("one@mailrun.local", "m")])


async def test_a_failed_commit_and_a_lost_answer_end_in_each_mail_accepted_once(
    tmp_path: Path,
) -> None:
    # The first batch's transaction fails: refused whole, nothing stored. The
    # next one commits but its answer comes too late: the producer cannot tell,
    # sends again with the same message ids, and gets the first receipts.
    configure_failpoints("hub.accept.before_commit=1*raise;hub.accept.after_commit=1*sleep(1500)")
    try:
        async with running_hub(tmp_path) as hub:
            await hub.deploy("one")
            added, key = await hub.add_producer("orders")
            mails = [
                ingress_mail("one@mailrun.local", f"m{i}", message_id=f"<{i}@x>") for i in range(3)
            ]
            async with hub.producer(added["id"], key) as client:
                with pytest.raises(IngressRefused) as refused:
                    await client.send(mails)
                assert refused.value.reason == Reason.STORE_UNAVAILABLE
                assert await hub.dispatches() == 0
                client.timeout = 0.5
                with pytest.raises(IngressUnavailable):
                    await client.send(mails)

                async def stored() -> bool:
                    return await hub.dispatches() == 3

                await wait_for(stored, what="the unanswered batch committed")
                client.timeout = 10.0
                receipts = await client.send(mails)
            assert [(r.status, r.duplicate, r.seq) for r in receipts] == [
                ("accepted", True, 1),
                ("accepted", True, 2),
                ("accepted", True, 3),
            ]
            assert await hub.dispatches() == 3
    finally:
        configure_failpoints("")


async def test_a_sender_the_deployment_does_not_take_is_refused_and_not_stored(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        await hub.deploy("one")
        r = await hub.http.patch(
            "/workflows/deployments/one", json={"mail": {"deny_from": ["*@spam.test"]}}
        )
        assert r.status_code == 200, r.text
        added, key = await hub.add_producer("orders")
        async with hub.producer(added["id"], key) as client:
            receipts = await client.send(
                [
                    as_ingress({"to": "one@mailrun.local", "subject": "s", "from": "e@spam.test"}),
                    as_ingress({"to": "one@mailrun.local", "subject": "k", "from": "a@ok.test"}),
                ]
            )
        answers = [msgspec.to_builtins(x) for x in receipts]
        assert [(x["status"], x.get("reason")) for x in answers] == [
            ("rejected", "sender_not_allowed"),
            ("accepted", None),
        ]
        assert await hub.dispatches() == 1
