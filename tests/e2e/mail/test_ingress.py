"""The NATS mail ingress under `mailrun up` (real processes, auth on): an
operator adds a producer with the CLI, the producer sends batches with its
credentials and the deployment's run processes them; the credentials reach
nothing but the producer's own subject; removing the producer revokes them.
docs/security.md ("Producer identities") says why each refusal happens."""

from __future__ import annotations

import functools
import json
from typing import Any

import anyio
import msgspec
import pytest

from hub import IngressClient, ingress_mail
from runtime import HubBoot, Subjects, encode, new_id
from runtime.wire import IngressBatch
from tests.support import wait_for
from tests.support.servers.identities import admitted, peer, refusal

from ..harness import MAILRUN, Up, mailrun_up, recorder_source

pytestmark = pytest.mark.anyio


async def mailrun(up: Up, *args: str) -> str:
    done = await anyio.run_process([MAILRUN, *args, *up.hub_options], check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def add_producer(up: Up, name: str) -> dict[str, Any]:
    added: dict[str, Any] = json.loads(await mailrun(up, "producer", "add", name, "--json"))
    return added


def batch(mails: list[Any]) -> bytes:
    return encode(IngressBatch(mails=[msgspec.Raw(msgspec.msgpack.encode(m)) for m in mails]))


async def test_a_producer_sends_batches_over_nats_and_is_revoked_on_removal(
    tmp_path: Any,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("orders", recorder_source())
        shop, other = await add_producer(up, "shop"), await add_producer(up, "other")
        health = await up.healthz()
        assert health is not None
        url = health["nats_url"]
        # Both admitted: no reload is under way when the checks below connect.
        for added in (shop, other):
            probe = functools.partial(admitted, url, added["seed"])
            await wait_for(probe, what=f"producer {added['name']} admitted")
        assert shop["subject"] == Subjects().ingress(shop["id"]) and shop["seed"].startswith("SU")
        mails = [
            ingress_mail(dep["address"], f"m{n}", f"body {n}", message_id=f"<shop-{n}@x>")
            for n in range(1, 21)
        ]
        with anyio.fail_after(30):  # `up` admits the new identity within a poll
            async with IngressClient.connect(
                url, producer_id=shop["id"], seed=shop["seed"], backoff_max=0.05
            ) as client:
                receipts = await client.send(mails)
                again = await client.send(mails)  # a retry: no answer came, say
        assert [(r.status, r.seq, r.duplicate) for r in receipts] == [
            ("accepted", n, False) for n in range(1, 21)
        ]
        assert again == [msgspec.structs.replace(r, duplicate=True) for r in receipts]
        run_id = receipts[0].run_id
        assert run_id is not None and {r.run_id for r in receipts} == {run_id}
        run = await up.wait_state(run_id, lambda r: r["state"].get("count") == 20)
        assert [x["subject"] for x in run["state"]["seen"]] == [f"m{n}" for n in range(1, 21)]

        # With shop's credentials: nothing but its own subject.
        s, sidecar = Subjects(), Subjects(deployment_id=dep["id"])
        forged = batch([ingress_mail(dep["address"], "forged")])
        async with peer(url, shop["seed"], inbox_prefix=Subjects.inbox_prefix(shop["id"])) as nc:
            forbidden = [
                s.ingress(other["id"]),  # as the other producer
                *sidecar.requests(),  # as the deployment's sidecar
                *s.requests(),  # the shared hub subjects
                s.inbound(dep["id"]),  # mail straight to the sidecar
            ]
            for subject in forbidden:
                await nc.client.publish(
                    subject, forged, reply=f"{Subjects.inbox_prefix(shop['id'])}.x"
                )
            await nc.client.publish(s.announce, encode(HubBoot(boot_id=new_id("boot"))))
            await nc.flush()
            count = len(forbidden) + 1
            await wait_for(lambda: len(nc.errors) >= count, what=f"{count} violations")
            assert all("permissions violation" in e.lower() for e in nc.errors), nc.errors
        dispatches = up.query(
            "SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ?", dep["id"]
        )
        assert dispatches == [(20,)]

        listed = await mailrun(up, "producer", "list")
        assert "shop" in listed and other["id"] in listed
        done = await anyio.run_process(
            [MAILRUN, "nats-config", "--state-dir", str(up.state_dir)], check=False
        )
        config = done.stdout.decode()
        assert shop["nats_user"] in config and s.ingress(shop["id"]) in config

        # Removing shop revokes its identity: dropped now, refused from then on.
        async with peer(url, shop["seed"], inbox_prefix=Subjects.inbox_prefix(shop["id"])) as nc:
            removed = json.loads(await mailrun(up, "producer", "remove", "shop", "--json"))
            assert removed["status"] == "removed"
            await wait_for(lambda: not nc.client.is_connected, what="shop's connection dropped")
        reason = await wait_for(lambda: refusal(url, shop["seed"]), what="shop refused")
        assert "Authorization Violation" in reason
        conf = (up.state_dir / "nats.conf").read_text()
        assert shop["nats_user"] not in conf and other["nats_user"] in conf
        listed = await mailrun(up, "producer", "list")
        assert "shop" not in listed and "other" in listed
