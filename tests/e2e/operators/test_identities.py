"""NATS identities under `mailrun up` (real processes, auth on): with
deployment A's credentials, every forged frame of the attack list is tried
against deployment B, and nothing changes; A's credentials stop working when
A is deleted. docs/security.md says why each one fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import (
    Ack,
    AckResult,
    BlobGet,
    FrameDecoder,
    HubBoot,
    MailInbound,
    MailSent,
    Reason,
    Refused,
    RunCompleted,
    RunEvents,
    Subjects,
    encode,
    new_id,
)
from runtime.wire import INLINE_BODY_LIMIT
from tests.e2e.harness import Up, mailrun_up, recorder_source
from tests.support import wait_for
from tests.support.servers.identities import Peer, peer, refusal

pytestmark = pytest.mark.anyio

_REPLY: FrameDecoder[Refused] = FrameDecoder(Refused)


def session_of(health: dict[str, Any], deployment_id: str) -> dict[str, Any]:
    [row] = [s for s in health["sessions"] if s["deployment_id"] == deployment_id]
    return dict(row)


async def refused_by_server(attacker: Peer, count: int) -> None:
    """Until the server has reported ``count`` permission violations in all."""
    await wait_for(lambda: len(attacker.errors) >= count, what=f"{count} violations")
    assert all("permissions violation" in e.lower() for e in attacker.errors), attacker.errors


async def b_view(up: Up, b: dict[str, Any], run_id: str) -> tuple[Any, ...]:
    """What a forged frame could change about B, as the hub and the sidecar see it."""
    run = await up.run(run_id)
    dispatches = up.query("SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ?",
                          b["id"])  # fmt: skip
    return run["status"], run["state"]["count"], dispatches, await up.sidecar_pid(b["id"])


async def test_a_deployments_credentials_cannot_act_for_another(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        a = await up.deploy("alpha", recorder_source())
        b = await up.deploy("beta", recorder_source())
        big = "x" * (INLINE_BODY_LIMIT + 1)  # kept as a blob: a claim check in the frame
        first = (await up.send(b["address"], "first", big)).json()
        await up.wait_state(first["run_id"], lambda r: r["state"].get("count") == 1)
        warm = (await up.send(a["address"], "warm")).json()
        await up.wait_state(warm["run_id"], lambda r: r["state"].get("count") == 1)
        health = await up.healthz()
        assert health is not None
        session_a, session_b = session_of(health, a["id"]), session_of(health, b["id"])
        before = await b_view(up, b, first["run_id"])
        [(digest,)] = up.query(
            "SELECT body_digest FROM workflow_run_dispatch WHERE deployment_id = ?", b["id"]
        )
        s, own = Subjects(), Subjects(deployment_id=a["id"])
        url = health["nats_url"]
        assert "Authorization Violation" in await refusal(url, None)  # anonymous

        seed_a = up.record_of(a["id"]).nats_seed
        inbox_a = Subjects.inbox_prefix(a["id"])
        async with peer(url, seed_a, inbox_prefix=inbox_a) as attacker:
            nc = attacker.client
            # Forged RunEvents as B (a RunCompleted that bricked B, a MailSent
            # that spoofed B as a sender), with B's session id read off /healthz:
            forged = RunEvents(
                deployment_id=b["id"],
                session_id=session_b["session_id"],
                owner_epoch=session_b["owner_epoch"],
                events=[
                    RunCompleted(event_id=new_id("evt"), run_id=first["run_id"], result="x"),
                    MailSent(event_id=new_id("evt"), run_id=first["run_id"], to=a["address"]),
                ],
            )
            # ... on A's own subject the hub knows the sender is A, and refuses;
            reply = _REPLY.decode((await nc.request(own.events, encode(forged), timeout=5)).data)
            assert reply.reason == Reason.UNKNOWN_SESSION
            # ... B's blob, asked as A (A's session) or with B's session id;
            for session, why in (
                (session_a, Reason.UNKNOWN_BLOB),
                (session_b, Reason.UNKNOWN_SESSION),
            ):
                get = BlobGet(
                    digest=digest,
                    deployment_id=session["deployment_id"],
                    session_id=session["session_id"],
                )
                reply = _REPLY.decode((await nc.request(own.blob, encode(get), timeout=5)).data)
                assert reply.reason == why
            # ... and on B's subject or the shared one, the server refuses it.
            b_subjects = Subjects(deployment_id=b["id"])
            for subject in (b_subjects.events, s.events, b_subjects.blob):
                await nc.publish(subject, encode(forged), reply=f"{inbox_a}.x")
            # A forged MailInbound to B (the handler ran it; the real mail stuck).
            mail = MailInbound(
                dispatch_id=new_id("dsp"),
                deployment_id=b["id"],
                run_id=first["run_id"],
                address=b["address"],
                seq=2,
                subject="forged",
                owner_epoch=session_b["owner_epoch"],
                session_id=session_b["session_id"],
            )
            await nc.publish(s.inbound(b["id"]), encode(mail))
            # Forged Acks: to see the hub's requests to B, then to answer one.
            await nc.subscribe(s.inbound(b["id"]))
            await nc.subscribe(f"{s.prefix}.mail.inbound.*")
            ack = Ack(dispatch_id=new_id("dsp"), result=AckResult.STORED)
            await nc.publish("_INBOX.forged", encode(ack))
            # A forged HubBoot, and a Refused{owner_conflict} to B's hello.
            await nc.publish(s.announce, encode(HubBoot(boot_id=new_id("boot"))))
            await nc.subscribe(b_subjects.hello)
            conflict = Refused(reason=Reason.OWNER_CONFLICT)
            await nc.publish(f"{Subjects.inbox_prefix(b['id'])}.forged", encode(conflict))
            await nc.flush()
            await refused_by_server(attacker, 10)

        # Nothing changed for B: same run, state, dispatches, process and session.
        assert await b_view(up, b, first["run_id"]) == before
        health = await up.healthz()
        assert health is not None
        assert session_of(health, b["id"])["session_id"] == session_b["session_id"]
        second = (await up.send(b["address"], "second")).json()
        run = await up.wait_state(second["run_id"], lambda r: r["state"].get("count") == 2)
        assert [x["subject"] for x in run["state"]["seen"]] == ["first", "second"]
        assert run["status"] == "running"

        # Deleting A revokes its identity: an open connection is dropped and
        # the credentials connect no more.
        async with peer(url, seed_a, inbox_prefix=inbox_a) as victim:
            r = await up.http.delete(f"/workflows/deployments/{a['id']}")
            assert r.status_code == 200, r.text
            await wait_for(lambda: not victim.client.is_connected, what="A's connection dropped")
        reason = await wait_for(lambda: refusal(url, seed_a), what="A's credentials refused")
        assert "Authorization Violation" in reason
        conf = up.state_dir / "nats.conf"
        assert b["id"] in conf.read_text() and a["id"] not in conf.read_text()
        assert conf.stat().st_mode & 0o777 == 0o600
        assert (up.state_dir / "nats-hub.seed").stat().st_mode & 0o777 == 0o600
