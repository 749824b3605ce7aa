"""EnvelopeQuarantined at the hub: a dead letter, a cancelled dispatch, a visible count."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from hub.store import Accepted, get_deployment, list_deployments
from runtime import (
    DispatchProcessed,
    EnvelopeQuarantined,
    EventsAck,
    Welcome,
    new_id,
)
from tests.support.harnesses.wire import accept, deploy, owned, running_hub, send

pytestmark = pytest.mark.anyio


def quarantined(receipt: Accepted, run_id: str = "") -> EnvelopeQuarantined:
    return EnvelopeQuarantined(
        event_id=new_id("evt"),
        run_id=run_id,
        dispatch_id=receipt.dispatch_id,
        reason="unreadable inbox envelope: truncated",
    )


async def test_a_quarantined_envelope_cancels_its_dispatch_and_is_counted_once(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2, r3) = await owned(hub, 3)
        event = quarantined(r2)  # too damaged to name its run: found by dispatch
        for _ in range(2):  # resent after a lost ack: applied once
            ack = await send(car, event)
            assert isinstance(ack, EventsAck) and ack.ids == [event.event_id]
        row = await hub.one(
            "SELECT status, last_error FROM workflow_run_dispatch WHERE id = ?", r2.dispatch_id
        )
        assert row["status"] == "cancelled"
        assert row["last_error"] == "quarantined: unreadable inbox envelope: truncated"
        letters = await hub.all("SELECT source, reason, deployment_id FROM dead_letter")
        assert [tuple(r) for r in letters] == [
            ("quarantine", row["last_error"], car.dep.id),
        ]
        kept = await hub.one("SELECT run_id, kind FROM run_event WHERE id = ?", event.event_id)
        assert (kept["run_id"], kept["kind"]) == (r2.run_id, "EnvelopeQuarantined")
        assert (await hub.store.read(partial(get_deployment, key=car.dep.id))).quarantined == 1

        # The seqs after it are applied as usual, and the floor passes it.
        later = DispatchProcessed(
            event_id=new_id("evt"),
            run_id=r3.run_id,
            dispatch_id=r3.dispatch_id,
            seq=r3.seq,
            state={"seen": 2},
        )
        first = DispatchProcessed(
            event_id=new_id("evt"), run_id=r1.run_id, dispatch_id=r1.dispatch_id, seq=r1.seq
        )
        assert isinstance(await send(car, first, later), EventsAck)
        run = await hub.one("SELECT last_seq, state FROM workflow_run WHERE id = ?", r3.run_id)
        assert (run["last_seq"], json.loads(run["state"])) == (r3.seq, {"seen": 2})
        welcome = await car.hello()
        assert isinstance(welcome, Welcome) and welcome.floor_seq == r3.seq


async def test_quarantine_counts_are_per_deployment_and_foreign_dispatches_are_not_applied(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (mine,) = await owned(hub, 1, "mine")
        other = await deploy(hub.store, "other")
        (theirs,) = await accept(hub, other, [b"x"])
        assert isinstance(await send(car, quarantined(mine), quarantined(theirs)), EventsAck)
        row = await hub.one(
            "SELECT status FROM workflow_run_dispatch WHERE id = ?", theirs.dispatch_id
        )
        assert row["status"] == "reserved"
        counts = {d.name: d.quarantined for d in await hub.store.read(list_deployments)}
        assert counts == {"mine": 1, "other": 0}
        letters = await hub.all("SELECT source, reason FROM dead_letter ORDER BY id")
        assert [r["source"] for r in letters] == ["quarantine", "events"]
        assert letters[1]["reason"].startswith("unknown_dispatch")
