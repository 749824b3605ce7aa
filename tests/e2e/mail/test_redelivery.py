"""A forged Ack for a frame that never reached the sidecar: the hub takes the
mail for delivered, the sidecar never had it. After the redelivery bound the
hub sends it again and the mail is processed, exactly once.

Real processes: nats-server, and `mailrun up` with its hub and sidecar, both
talking to NATS through a fault proxy that loses the one frame; the forger
is a client of its own on nats-server.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from runtime import (
    Ack,
    AckBatch,
    AckResult,
    FrameDecoder,
    MailBatch,
    MailInbound,
    Ping,
    Transport,
    encode,
    open_nats,
)
from runtime.config import REDELIVER_AFTER_ENV
from tests.faults.harness.proxy import NatsFaultProxy
from tests.support import NatsServerProcess, wait_for

from ..harness import Up, mailrun_up, recorder_source

pytestmark = pytest.mark.anyio

LOST = "lost-1"  # the message id of the mail whose frame is lost


async def forge_acks(
    bus: Transport,
    subject: str,
    forged: list[str],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Answer every frame of the mail ``LOST`` with ``stored``, in the sidecar's place
    (a batch that holds it: every item ``stored``)."""
    decoder: FrameDecoder[MailInbound | MailBatch | Ping] = FrameDecoder(
        MailInbound | MailBatch | Ping
    )
    sub = await bus.subscribe(subject)
    try:
        await bus.flush()
        task_status.started()
        async for message in sub:
            frame = decoder.decode(message.data)
            if isinstance(frame, MailInbound) and frame.message_id == LOST:
                forged.append(frame.dispatch_id)
                ack = Ack(dispatch_id=frame.dispatch_id, result=AckResult.STORED)
                await message.respond(encode(ack))
            elif isinstance(frame, MailBatch) and any(f.message_id == LOST for f in frame.items):
                forged.extend(f.dispatch_id for f in frame.items)
                acks = [
                    Ack(dispatch_id=f.dispatch_id, result=AckResult.STORED) for f in frame.items
                ]
                await message.respond(encode(AckBatch(acks=acks)))
    finally:
        with anyio.CancelScope(shield=True):
            await sub.unsubscribe()


def in_inbox(up: Up, deployment_id: str, dispatch_id: str) -> int:
    path = up.state_dir / "sidecars" / deployment_id / "workflow-runs" / deployment_id
    db = sqlite3.connect(f"file:{path / 'inbox.db'}?mode=ro", uri=True)
    try:
        [(n,)] = db.execute("SELECT COUNT(*) FROM inbox WHERE dispatch_id = ?", (dispatch_id,))
        return int(n)
    finally:
        db.close()


async def dispatch(up: Up, dispatch_id: str) -> dict[str, Any]:
    r = await up.http.get(f"/dispatches/{dispatch_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_a_forged_ack_for_a_lost_frame_is_sent_again_and_processed_once(
    tmp_path: Path, nats_server: NatsServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REDELIVER_AFTER_ENV, "1")  # `up` passes it on to the hub
    async with (
        NatsFaultProxy(nats_server.url) as proxy,
        mailrun_up(tmp_path, "--nats", proxy.url) as up,
        open_nats(nats_server.url, name="forger") as forger_bus,
        anyio.create_task_group() as tg,
    ):
        dep = await up.deploy("forged", recorder_source())
        warm = (await up.send(dep["address"], "warm-up")).json()
        await up.wait_state(warm["run_id"], lambda r: r["state"].get("count") == 1)

        # Every frame of the mail LOST is dropped on its way to the sidecar,
        # and a forger answers it "stored".
        subject = f"mailrun.mail.inbound.{dep['id']}"
        lose = proxy.add_rule(
            "drop", subject, direction="to_client", match=lambda f: LOST.encode() in f.payload
        )
        forged: list[str] = []
        forger = anyio.CancelScope()

        async def forging(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with forger:
                await forge_acks(forger_bus, subject, forged, task_status=task_status)

        await tg.start(forging)
        lost = (await up.send(dep["address"], "lost", message_id=LOST)).json()
        await wait_for(
            lambda: _status_is(up, lost["dispatch_id"], "delivered"), what="the forged delivery"
        )
        forger.cancel()
        proxy.remove_rule(lose)
        assert lose.hits >= 1 and set(forged) == {lost["dispatch_id"]}
        assert in_inbox(up, dep["id"], lost["dispatch_id"]) == 0, "the sidecar never had it"

        # The next mail reaches the sidecar, and waits there behind the lost one.
        behind = (await up.send(dep["address"], "behind")).json()

        # Past the bound the hub sends both again: the lost one is stored now,
        # the other answered `duplicate`, and both are processed in order, once.
        run = await up.wait_state(
            lost["run_id"], lambda r: r["state"].get("count") == 3, timeout=30
        )
        seen = run["state"]["seen"]
        assert [s["subject"] for s in seen] == ["warm-up", "lost", "behind"]
        assert [s["dispatch_id"] for s in seen[1:]] == [lost["dispatch_id"], behind["dispatch_id"]]
        for receipt in (lost, behind):
            await wait_for(
                lambda r=receipt: _status_is(up, r["dispatch_id"], "processed"),
                what="the dispatches processed",
            )
        assert in_inbox(up, dep["id"], lost["dispatch_id"]) == 1

        metrics = (await up.http.get("/metrics")).text
        [total] = [
            line for line in metrics.splitlines() if line.startswith("mailrun_dispatch_redelivered")
        ]
        assert float(total.split()[1]) >= 1
        health = await up.healthz()
        assert health is not None and health["stuck"] == []
        view = (await up.http.get(f"/workflows/deployments/{dep['id']}")).json()
        assert view["stuck"] == 0 and view["pending_dispatches"] == 0
        tg.cancel_scope.cancel()


async def _status_is(up: Up, dispatch_id: str, status: str) -> bool:
    return (await dispatch(up, dispatch_id))["status"] == status
