"""The permissions mailrun gives each NATS identity, on a real nats-server.

The server is the one that enforces them; these tests prove that the config
``hub.natsauth`` renders makes it refuse what a deployment's identity must
not do. Every negative check is closed by a message that must arrive after
the refused one (one publisher, one subscription: NATS keeps their order),
so "nothing arrived" is observed, not waited for.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.msg import Msg

from hub.natsauth import new_user_key
from runtime import Subjects, open_nats
from tests.support import wait_for
from tests.support.servers.identities import authorized_server, collector, explain, peer, refusal

pytestmark = pytest.mark.anyio


async def test_a_client_without_credentials_or_with_unknown_ones_is_refused(
    tmp_path: Path,
) -> None:
    async with authorized_server(tmp_path, "a") as auth:
        for seed in (None, new_user_key().seed):
            assert "Authorization Violation" in await refusal(auth.server.url, seed)
        async with peer(auth.server.url, auth.hub.seed) as hub:
            await hub.flush()  # the hub's identity is admitted


async def test_a_deployment_publishes_only_its_own_request_subjects(tmp_path: Path) -> None:
    async with authorized_server(tmp_path, "a", "b") as auth:
        a, b = auth.deployments
        s = auth.subjects
        seen: list[Msg] = []
        async with (
            peer(auth.server.url, auth.hub.seed) as hub,
            peer(auth.server.url, auth.deployments[a].seed) as attacker,
        ):
            await hub.client.subscribe(">", cb=collector(seen))
            await hub.flush()
            forbidden = [
                *Subjects(s.prefix, deployment_id=b).requests(),  # speaking as B
                *s.requests(),  # the shared subjects of earlier releases
                s.inbound(b),  # mail to B: only the hub delivers
                s.inbound(a),  # not even to itself
                s.announce,  # a HubBoot
                "_INBOX.forged",  # an answer to one of the hub's requests
                f"{Subjects.inbox_prefix(b)}.forged",  # an answer to one of B's
            ]
            for subject in forbidden:
                await attacker.client.publish(subject, b"forged")
            own = Subjects(s.prefix, deployment_id=a).requests()
            for subject in own:
                await attacker.client.publish(subject, b"own")
            why = explain(auth, hub=hub, attacker=attacker)
            await wait_for(lambda: len(seen) >= len(own), what="A's own requests", explain=why)
            assert [m.subject for m in seen] == own
            await wait_for(
                lambda: len(attacker.errors) >= len(forbidden), what="violations", explain=why
            )
            assert all("permissions violation" in e.lower() for e in attacker.errors)


async def test_a_deployment_subscribes_only_to_its_own_subjects(tmp_path: Path) -> None:
    async with authorized_server(tmp_path, "a", "b") as auth:
        a, b = auth.deployments
        s = auth.subjects
        got: list[Msg] = []
        async with (
            peer(auth.server.url, auth.hub.seed) as hub,
            peer(auth.server.url, auth.deployments[a].seed) as attacker,
        ):
            forbidden = [
                s.inbound(b),
                f"{s.prefix}.mail.inbound.*",
                f"{s.prefix}.>",
                Subjects(s.prefix, deployment_id=b).events,
                f"{Subjects.inbox_prefix(b)}.>",
                "_INBOX.>",
                ">",
            ]
            for subject in forbidden:
                await attacker.client.subscribe(subject, cb=collector(got))
            inbox = Subjects.inbox_prefix(a)
            for subject in [s.inbound(a), s.announce, f"{inbox}.>"]:
                await attacker.client.subscribe(subject, cb=collector(got))
            allowed = [s.inbound(a), s.announce, f"{inbox}.x"]
            await attacker.flush()
            await wait_for(lambda: len(attacker.errors) >= len(forbidden), what="violations")
            assert all("permissions violation" in e.lower() for e in attacker.errors)
            for subject in [s.inbound(b), Subjects(s.prefix, deployment_id=b).events]:
                await hub.client.publish(subject, b"for B")
            await hub.client.publish(f"{Subjects.inbox_prefix(b)}.x", b"for B")
            for subject in allowed:
                await hub.client.publish(subject, b"for A")
            await wait_for(lambda: len(got) >= len(allowed), what="A's own subjects")
            assert sorted(m.subject for m in got) == sorted(allowed)
            assert {m.data for m in got} == {b"for A"}


async def test_a_deployment_answers_only_the_requests_it_received(tmp_path: Path) -> None:
    async with authorized_server(tmp_path, "a", "b") as auth:
        a, b = auth.deployments
        s = auth.subjects
        answers: list[Msg] = []
        async with (
            peer(auth.server.url, auth.hub.seed) as hub,
            peer(auth.server.url, auth.deployments[a].seed) as attacker,
            peer(auth.server.url, auth.deployments[b].seed) as owner,
        ):

            async def answer(msg: Msg) -> None:
                await msg.respond(b"B's answer")

            async def answer_own(msg: Msg) -> None:
                await msg.respond(b"A's answer")

            await owner.client.subscribe(s.inbound(b), cb=answer)
            await attacker.client.subscribe(s.inbound(a), cb=answer_own)
            await owner.flush()
            await attacker.flush()
            reply = "_INBOX.hub-request-to-b"
            await hub.client.subscribe(reply, cb=collector(answers))
            await hub.flush()
            # The attacker knows where the hub waits and answers first.
            await attacker.client.publish(reply, b"forged Ack")
            await attacker.flush()
            await hub.client.publish(s.inbound(b), b"MailInbound", reply=reply)
            await wait_for(lambda: answers, what="B's answer")
            own = await hub.client.request(s.inbound(a), b"MailInbound", timeout=5)
            assert [m.data for m in answers] == [b"B's answer"]
            assert own.data == b"A's answer"  # allow_responses: its own requests only
            await wait_for(lambda: attacker.errors, what="the violation")
            assert "permissions violation" in attacker.errors[0].lower()


async def test_a_removed_identity_is_disconnected_at_the_reload_and_refused_after(
    tmp_path: Path,
) -> None:
    async with authorized_server(tmp_path, "a", "b") as auth:
        a, b = auth.deployments
        seed_a = auth.deployments[a].seed
        closed: list[bool] = []

        async def on_closed() -> None:
            closed.append(True)

        async with (
            peer(auth.server.url, seed_a, closed_cb=on_closed) as victim,
            peer(auth.server.url, auth.deployments[b].seed) as other,
        ):
            await auth.revoke(a)
            await wait_for(lambda: closed, what="A's connection to be closed by the server")
            assert not victim.client.is_connected
            await other.flush()  # B's stays
        assert "Authorization Violation" in await refusal(auth.server.url, seed_a)


async def test_a_transport_says_when_the_server_refuses_its_identity(tmp_path: Path) -> None:
    async with authorized_server(tmp_path, "a") as auth:
        [a] = auth.deployments
        async with open_nats(
            auth.server.url, name="a", seed=auth.deployments[a].seed, backoff_max=0.05
        ) as transport:
            assert transport.is_connected and not transport.credentials_refused
            await auth.revoke(a)
            # It keeps trying (a reload may admit it again) and says why it fails.
            await wait_for(lambda: transport.credentials_refused, what="the refusal noticed")
            assert not transport.is_connected
