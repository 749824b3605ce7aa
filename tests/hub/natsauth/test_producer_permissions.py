"""The permissions of a producer's NATS identity, on a real nats-server: it
may publish only on its own ingress subject and read only its own inbox.

As in test_permissions.py, every negative check is closed by a message that
must arrive after the refused ones, so "nothing arrived" is observed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.msg import Msg

from runtime import Subjects
from tests.support import wait_for
from tests.support.servers.identities import authorized_server, collector, explain, peer, refusal

pytestmark = pytest.mark.anyio


async def test_a_producer_publishes_only_on_its_own_ingress_subject(tmp_path: Path) -> None:
    async with authorized_server(tmp_path, "a", producers=2) as auth:
        [a] = auth.deployments
        p, q = auth.producers
        s = auth.subjects
        seen: list[Msg] = []
        async with (
            peer(auth.server.url, auth.hub.seed) as hub,
            peer(auth.server.url, auth.producers[p].seed) as producer,
        ):
            await hub.client.subscribe(">", cb=collector(seen))
            await hub.flush()
            forbidden = [
                s.ingress(q),  # speaking as another producer
                *Subjects(s.prefix, deployment_id=a).requests(),  # as a sidecar
                *s.requests(),  # the hub's shared request subjects
                s.inbound(a),  # mail straight to a sidecar
                s.announce,  # a HubBoot
                "_INBOX.forged",  # an answer to one of the hub's requests
                f"{Subjects.inbox_prefix(q)}.forged",  # an answer to Q
                f"{Subjects.inbox_prefix(a)}.forged",  # an answer to a sidecar
            ]
            for subject in forbidden:
                await producer.client.publish(subject, b"forged")
            await producer.client.publish(s.ingress(p), b"own")
            why = explain(auth, hub=hub, producer=producer)
            await wait_for(lambda: seen, what="P's own batch", explain=why)
            assert [m.subject for m in seen] == [s.ingress(p)]
            await wait_for(
                lambda: len(producer.errors) >= len(forbidden), what="violations", explain=why
            )
            assert all("permissions violation" in e.lower() for e in producer.errors)


async def test_a_producer_reads_only_its_own_inbox(tmp_path: Path) -> None:
    async with authorized_server(tmp_path, "a", producers=2) as auth:
        [a] = auth.deployments
        p, q = auth.producers
        s = auth.subjects
        got: list[Msg] = []
        async with (
            peer(auth.server.url, auth.hub.seed) as hub,
            peer(auth.server.url, auth.producers[p].seed) as producer,
        ):
            forbidden = [
                s.ingress(),  # every producer's batches
                s.ingress(q),
                s.ingress(p),  # not even its own: only the hub serves it
                f"{Subjects.inbox_prefix(q)}.>",  # the hub's answers to Q
                s.inbound(a),
                s.announce,
                "_INBOX.>",
                ">",
            ]
            for subject in forbidden:
                await producer.client.subscribe(subject, cb=collector(got))
            await producer.client.subscribe(f"{Subjects.inbox_prefix(p)}.>", cb=collector(got))
            await producer.flush()
            await wait_for(lambda: len(producer.errors) >= len(forbidden), what="violations")
            assert all("permissions violation" in e.lower() for e in producer.errors)
            for subject in [s.ingress(q), s.ingress(p), s.inbound(a), s.announce]:
                await hub.client.publish(subject, b"not for P")
            await hub.client.publish(f"{Subjects.inbox_prefix(q)}.x", b"not for P")
            await hub.client.publish(f"{Subjects.inbox_prefix(p)}.x", b"for P")
            await wait_for(lambda: got, what="P's answer")
            assert [(m.subject, m.data) for m in got] == [
                (f"{Subjects.inbox_prefix(p)}.x", b"for P")
            ]


async def test_a_removed_producer_is_disconnected_and_refused(tmp_path: Path) -> None:
    async with authorized_server(tmp_path, producers=2) as auth:
        p, q = auth.producers
        seed = auth.producers[p].seed
        closed: list[bool] = []

        async def on_closed() -> None:
            closed.append(True)

        async with (
            peer(auth.server.url, seed, closed_cb=on_closed) as removed,
            peer(auth.server.url, auth.producers[q].seed) as other,
        ):
            await auth.revoke_producer(p)
            await wait_for(lambda: closed, what="P's connection closed by the server")
            assert not removed.client.is_connected
            await other.flush()  # Q's stays
        assert "Authorization Violation" in await refusal(auth.server.url, seed)
