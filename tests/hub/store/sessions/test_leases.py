"""What several hubs on one PostgreSQL share: leases and roles
(hub/store/leases.py), blobs, and the change feed's order."""

from __future__ import annotations

from collections.abc import Awaitable
from functools import partial

import asyncpg
import pytest

from hub._errors import LeaseLost
from hub.store import (
    FEED_HOLD,
    Fence,
    LeaseRound,
    LeaseToken,
    Store,
    Trigger,
    accept_triggers,
    check_fence,
    collect_blobs,
    feed_start,
    hold_role,
    last_change_id,
    open_store,
    read_feed,
    release_all,
    renew_and_take,
)
from runtime.wire import INLINE_BODY_LIMIT
from tests.support.servers.postgres import PostgresServer
from tests.support.store import execute, rows

from ..accepting.test_accept import deploy

pytestmark = pytest.mark.anyio


def take(store: Store, hub: str, ttl: float = 30.0) -> Awaitable[LeaseRound]:
    return store.transact(lambda tx: renew_and_take(tx, hub, "", ttl))


def held(deployment_id: str, hub: str, token: int) -> Fence:
    """The fence of a write by ``hub`` under lease ``token`` (nobody
    claimed the deployment: its owner epoch is 0)."""
    return Fence(deployment_id, 0, LeaseToken(hub, token))


# The statements are the same on SQLite (one schema: its lease tables stay
# empty in a hub's use), so these run on both.
async def test_hubs_share_the_deployments_and_take_over_expired_leases_with_a_new_token(
    database: str,
) -> None:
    async with await open_store(database) as store:
        deps = [await deploy(store, f"d{i}") for i in range(4)]
        first = await take(store, "hub-a")
        assert set(first.held) == set(deps) and first.hubs == 1  # alone: all of them
        second = await take(store, "hub-b")
        assert second.held == {} and second.hubs == 2  # none free yet
        first = await take(store, "hub-a")  # above its share of 2: lets 2 expire
        assert len(first.held) == 2
        second = await take(store, "hub-b")
        assert set(second.held) == set(deps) - set(first.held)
        assert all(token == 2 for token in second.held.values())  # a new holder: a new token
        assert (await take(store, "hub-a")).held == first.held
        taken = next(iter(second.held))

        # The old holder's token no longer passes the fence; the new one's does.
        with pytest.raises(LeaseLost):
            await store.transact(lambda tx: check_fence(tx, held(taken, "hub-a", 1)))
        await store.transact(lambda tx: check_fence(tx, held(taken, "hub-b", 2)))

        # A new process of a hub (its state dir's hub id) takes its leases
        # back at once, expired or not, with new tokens: its previous
        # process, were it still running, no longer passes the fence.
        await execute(store, "UPDATE hub_lease SET expires_at = 0")
        back = await store.transact(
            lambda tx: renew_and_take(tx, "hub-b", "", 30.0, restarted=True)
        )
        assert back.held == {dep: token + 1 for dep, token in second.held.items()}
        with pytest.raises(LeaseLost):
            await store.transact(lambda tx: check_fence(tx, held(taken, "hub-b", 2)))

        # A hub that stops frees its leases at once.
        await store.transact(lambda tx: release_all(tx, "hub-b"))
        first = await take(store, "hub-a")
        assert set(first.held) == set(deps) and first.hubs == 1


async def test_a_role_is_one_hubs_until_it_expires(database: str) -> None:
    async with await open_store(database) as store:

        def hold(hub: str, ttl: float = 30.0) -> Awaitable[bool]:
            return store.transact(lambda tx: hold_role(tx, "relay", hub, ttl))

        assert await hold("hub-a")
        assert not await hold("hub-b")
        assert await hold("hub-a")  # renewed
        await execute(store, "UPDATE hub_role SET expires_at = 0")
        assert await hold("hub-b")
        assert not await hold("hub-a")
        assert await rows(store, "SELECT hub_id, token FROM hub_role") == [("hub-b", 2)]


async def test_on_postgresql_a_blob_named_again_is_spared_by_collection(
    postgres_server: PostgresServer,
) -> None:
    """Another hub may name a blob again while this one collects it: an
    accept makes the blob new again, and only old blobs are collected."""
    async with await open_store(postgres_server.new_database()) as store:
        await deploy(store, "flow")

        async def accept(body: bytes) -> None:
            trigger = Trigger(address="flow@mailrun.local", sender="a@b.c", body=body)
            await store.transact(partial(accept_triggers, triggers=[trigger]))

        async def settle(*, age: bool) -> None:
            await execute(store, "UPDATE workflow_run_dispatch SET status = 'processed'")
            if age:
                await execute(store, "UPDATE blob SET created_at = 0")

        await accept(b"a" * (INLINE_BODY_LIMIT + 1))
        await settle(age=True)
        assert (await store.transact(collect_blobs)).deleted == 1  # old and unnamed: collected
        reused = b"b" * (INLINE_BODY_LIMIT + 1)
        await accept(reused)
        await settle(age=True)
        await accept(reused)  # named again, as by another hub: new again
        await settle(age=False)
        assert (await store.transact(collect_blobs)).deleted == 0
        bodies = await rows(
            store,
            "SELECT size FROM blob WHERE digest NOT IN (SELECT digest FROM deployment_version)",
        )
        assert bodies == [(len(reused),)]


async def test_on_postgresql_the_feed_never_passes_a_change_still_being_committed(
    postgres_server: PostgresServer,
) -> None:
    """Two hubs' transactions: the one that took the lower change id commits
    last. A reader must not pass its id before it commits (or it would never
    send it), nor wait at the gap a rolled-back id leaves for longer than
    ``FEED_HOLD``."""
    url = postgres_server.new_database()
    async with await open_store(url) as store:
        dep = await deploy(store, "flow")
        start = await store.read(last_change_id)
        slow, fast = await asyncpg.connect(url), await asyncpg.connect(url)
        try:
            slow_tx, fast_tx = slow.transaction(), fast.transaction()
            await slow_tx.start()
            await fast_tx.start()
            insert = (
                "INSERT INTO workflow_run_dispatch (id, deployment_id, run_id, seq, kind, status,"
                " created_at) VALUES ($1, $2, 'run_x', $3, 'mail', 'reserved', 0)"
            )
            await slow.execute(insert, "dsp_slow", dep, 1)  # takes change id start+1
            await fast.execute(insert, "dsp_fast", dep, 2)  # takes start+2
            await fast_tx.commit()

            async def readable(hold: float = FEED_HOLD) -> list[str]:
                changes, _ = await read_feed(store, start, 100, hold=hold)
                return [c.row_id for c in changes]

            assert await readable() == []  # start+1 is still open: held
            assert await feed_start(store) <= start
            await slow_tx.commit()
            assert await readable() == ["dsp_slow", "dsp_fast"]  # in id order, none lost

            # A rolled-back transaction's id is a gap for good: passed once
            # the change after it is older than the hold.
            rolled = slow.transaction()
            await rolled.start()
            await slow.execute(insert, "dsp_gone", dep, 3)
            await rolled.rollback()
            await fast.execute(insert, "dsp_after", dep, 4)
            start += 2
            assert await readable() == []
            assert await readable(hold=0.0) == ["dsp_after"]
        finally:
            await slow.close()
            await fast.close()
