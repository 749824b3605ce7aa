"""The fence every write for a sidecar is made under (``hub.store``'s
``check_fence``): the owner epoch, and the lease of the hub that serves the
deployment (held on a PostgreSQL shared by several hubs), each on both
databases. A fenced write commits nothing."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest

from hub._errors import LeaseLost, StaleEpoch
from hub.store import (
    Accepted,
    Fence,
    LeaseToken,
    Store,
    Trigger,
    Tx,
    accept_triggers,
    open_store,
    record_answers,
)
from hub.store.sql import sql
from tests.support.harnesses.wire import deploy
from tests.support.servers.postgres import PostgresServer

pytestmark = pytest.mark.anyio

_STATUS = sql("SELECT status FROM workflow_run_dispatch WHERE id = ?")
_LEASE = sql(
    "INSERT INTO hub_lease (deployment_id, hub_id, token, expires_at) VALUES (?, ?, ?, 1e12)"
)


async def _accepted(store: Store, address: str) -> Accepted:
    def body(tx: Tx) -> Accepted:
        (accepted,), _ = accept_triggers(tx, [Trigger(address=address, body=b"x")])
        assert isinstance(accepted, Accepted)
        return accepted

    return await store.transact(body)


async def _status(store: Store, dispatch_id: str) -> str:
    row = await store.read(lambda tx: tx.fetch_one(_STATUS, (dispatch_id,)))
    assert row is not None
    return str(row[0])


def _ack(fence: Fence, dispatch_id: str) -> partial[None]:
    return partial(record_answers, fence=fence, acked=[dispatch_id], refused=[], now=time.time())


@pytest.mark.parametrize("which", ["sqlite", "postgresql"])
async def test_a_write_under_another_epoch_commits_nothing(
    which: str, tmp_path: Path, postgres_server: PostgresServer
) -> None:
    target = str(tmp_path / "hub.db") if which == "sqlite" else postgres_server.new_database()
    async with await open_store(target) as store:
        dep = await deploy(store)
        first, second = [await _accepted(store, dep.address) for _ in range(2)]
        with pytest.raises(StaleEpoch):  # nobody claimed it: its epoch is 0
            await store.transact(_ack(Fence(dep.id, 1), first.dispatch_id))
        with pytest.raises(StaleEpoch):
            await store.transact(_ack(Fence("dep_unknown", 0), first.dispatch_id))
        assert await _status(store, first.dispatch_id) == "reserved"
        await store.transact(_ack(Fence(dep.id, 0), second.dispatch_id))
        assert await _status(store, second.dispatch_id) == "delivered"


# SQLite has the lease tables too (one schema): a fence that carries a lease
# is checked the same there, though one file has one hub and no lease.
@pytest.mark.parametrize("which", ["sqlite", "postgresql"])
async def test_a_write_by_a_hub_that_lost_the_lease_commits_nothing(
    which: str, tmp_path: Path, postgres_server: PostgresServer
) -> None:
    target = str(tmp_path / "hub.db") if which == "sqlite" else postgres_server.new_database()
    async with await open_store(target) as store:
        dep = await deploy(store)
        first, second = [await _accepted(store, dep.address) for _ in range(2)]
        await store.transact(lambda tx: tx.execute(_LEASE, (dep.id, "hub-b", 2)))
        # Another hub holds it, or this one under an older token, or nobody.
        for lease in (LeaseToken("hub-a", 2), LeaseToken("hub-b", 1)):
            with pytest.raises(LeaseLost):
                await store.transact(_ack(Fence(dep.id, 0, lease), first.dispatch_id))
        other = await deploy(store, "other")
        with pytest.raises(LeaseLost):
            await store.transact(_ack(Fence(other.id, 0, LeaseToken("hub-b", 2)), "dsp_x"))
        assert await _status(store, first.dispatch_id) == "reserved"
        await store.transact(_ack(Fence(dep.id, 0, LeaseToken("hub-b", 2)), second.dispatch_id))
        assert await _status(store, second.dispatch_id) == "delivered"
