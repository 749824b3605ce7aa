"""MailBatch: several dispatches in one frame, one AckBatch in item order.

Each item is taken as it would be alone (stored, duplicate, refused); the
batch is answered once every item has its answer, and not at all when the
sidecar leaves an item unanswered (not its owner's), so the hub sends it
again whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import DispatchProcessed
from runtime.errors import RequestTimeout
from tests.support.harnesses.sidecar import deployed_sidecar, mail, make_deployment

pytestmark = pytest.mark.anyio


async def test_a_batch_is_stored_in_one_go_and_answered_item_by_item(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        first = mail(dep, 1, "one")
        assert (await hub.deliver(first)).result == "stored"
        items = [first, mail(dep, 2, "two"), mail(dep, 3, "three")]
        elsewhere = mail(dep, 4, "four", deployment_id="dep_other")
        reply = await hub.deliver_batch([*items, elsewhere])
        assert [(a.dispatch_id, a.result, a.reason) for a in reply.acks] == [
            (first.dispatch_id, "duplicate", ""),
            (items[1].dispatch_id, "stored", ""),
            (items[2].dispatch_id, "stored", ""),
            (elsewhere.dispatch_id, "refused", "wrong_deployment"),
        ]
        await hub.wait_events(DispatchProcessed, 3)
    assert dep.query("SELECT seq, outcome FROM inbox ORDER BY seq") == [
        (1, "processed"),
        (2, "processed"),
        (3, "processed"),
    ]


async def test_a_batch_of_an_older_epoch_is_refused_item_by_item(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, epoch=2) as (hub, _):
        stale = [mail(dep, 1, "a", owner_epoch=1), mail(dep, 2, "b", owner_epoch=1)]
        reply = await hub.deliver_batch(stale)
        assert [(a.result, a.reason) for a in reply.acks] == [("refused", "stale_epoch")] * 2
    assert dep.query("SELECT COUNT(*) FROM inbox") == [(0,)]


@pytest.mark.slow  # waits out batches left unanswered
async def test_a_batch_with_an_item_not_for_this_owner_is_not_answered(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        ours = mail(dep, 1, "ours")
        newer = mail(dep, 2, "from a newer owner", owner_epoch=5)
        with pytest.raises(RequestTimeout):
            await hub.deliver_batch([ours, newer], timeout=2.5)
        # Sent again whole once it is all this owner's: the stored one is a duplicate.
        reply = await hub.deliver_batch([ours, mail(dep, 2, "again")])
        assert [a.result for a in reply.acks] == ["duplicate", "stored"]
