"""A deployment's sleep in the store, on either database: granted in one
transaction under the session's fence, ``busy`` while a dispatch waits for
delivery (a paused deployment's kept ones do not count) or a version waits;
a rollout requests an asleep deployment's wake; a Welcome's delete wakes it;
the asleep deployments with work are those the wakes name; a grant racing
an accept leaves either a busy refusal or a sleeper the wakes name."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import asyncpg
import pytest

from hub._errors import StaleEpoch
from hub.store import (
    BUSY_RESERVED,
    BUSY_ROLLOUT,
    Fence,
    Store,
    Trigger,
    accept_triggers,
    add_version,
    asleep_deployments,
    deployments_to_wake,
    get_deployment,
    grant_sleep,
    open_store,
    pause_deployment,
    unpause_deployment,
    wake_deployment,
)
from hub.store.migrations import transfer
from runtime import Sources
from tests.support.harnesses.wire import Dep, deploy
from tests.support.servers.postgres import PostgresServer
from tests.support.store import read_all, read_one

pytestmark = pytest.mark.anyio

SOURCES = Sources(
    files={"flow.py": "async def main(ctx, item):\n    pass\n"}, entrypoint="flow:main"
)


async def fence(store: Store, dep: Dep) -> Fence:
    row = await read_one(store, "SELECT owner_epoch FROM deployment WHERE id = ?", dep.id)
    assert row is not None
    return Fence(dep.id, int(row[0]))


async def mail(store: Store, dep: Dep, subject: str = "hi") -> None:
    trigger = Trigger(address=dep.address, subject=subject, sender="a@b.c", body=b"x")
    outcomes, _ = await store.transact(partial(accept_triggers, triggers=[trigger]))
    assert len(outcomes) == 1


async def grant(store: Store, dep: Dep) -> str | None:
    return await store.transact(partial(grant_sleep, fence=await fence(store, dep)))


async def shown(store: Store, dep: Dep) -> tuple[str, float | None]:
    view = await store.read(partial(get_deployment, key=dep.id))
    return view.status, view.asleep_since


async def test_a_grant_a_busy_refusal_a_requested_wake_and_a_welcome(database: str) -> None:
    async with await open_store(database) as store:
        idle, busy, paused = [await deploy(store, n) for n in ("idle", "busy", "paused")]
        await mail(store, busy)
        assert await grant(store, idle) is None
        assert await grant(store, busy) == BUSY_RESERVED
        status, since = await shown(store, idle)
        assert status == "asleep" and since is not None
        assert await shown(store, busy) == ("deployed", None)
        # Granted again: the first grant's time stays.
        assert await grant(store, idle) is None
        assert (await shown(store, idle))[1] == since
        # A paused deployment's kept mail does not hold it awake, nor wake
        # it until it is unpaused.
        await store.transact(partial(pause_deployment, deployment_id=paused.id))
        await mail(store, paused)
        assert await grant(store, paused) is None
        assert await shown(store, paused) == ("paused", (await shown(store, paused))[1])
        assert await store.read(asleep_deployments) == sorted([idle.id, paused.id])
        assert await store.read(deployments_to_wake) == []
        await store.transact(partial(unpause_deployment, deployment_id=paused.id))
        assert await store.read(deployments_to_wake) == [paused.id]
        # A rollout to an asleep deployment requests its wake; to an awake
        # one, it keeps it from sleeping.
        await store.transact(partial(add_version, deployment_id=idle.id, sources=SOURCES))
        assert await store.read(deployments_to_wake) == [idle.id, paused.id]
        await store.transact(partial(add_version, deployment_id=busy.id, sources=SOURCES))
        assert await grant(store, busy) == BUSY_ROLLOUT
        # A Welcome's delete wakes it, once.
        assert await store.transact(partial(wake_deployment, deployment_id=idle.id)) is True
        assert await store.transact(partial(wake_deployment, deployment_id=idle.id)) is False
        assert await shown(store, idle) == ("deployed", None)
        assert await store.read(deployments_to_wake) == [paused.id]
        # Under a stale epoch, nothing is granted.
        stale = Fence(idle.id, (await fence(store, idle)).owner_epoch + 1)
        with pytest.raises(StaleEpoch):
            await store.transact(partial(grant_sleep, fence=stale))
        assert idle.id not in await store.read(asleep_deployments)


async def test_a_grant_racing_an_accept_is_busy_or_named_by_the_wakes(database: str) -> None:
    async with await open_store(database) as store:
        for i in range(8):
            dep = await deploy(store, f"race{i}")
            answers: list[str | None] = []

            async def sleep(dep: Dep = dep, answers: list[str | None] = answers) -> None:
                answers.append(await grant(store, dep))

            async with anyio.create_task_group() as tg:
                tg.start_soon(mail, store, dep)
                tg.start_soon(sleep)
            if answers == [None]:
                # Granted, then the mail came: the sleeper has work, named.
                assert dep.id in await store.read(deployments_to_wake)
            else:
                assert answers == [BUSY_RESERVED]
                assert dep.id not in await store.read(asleep_deployments)


async def test_a_sleeper_moves_to_postgresql_asleep(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    path = tmp_path / "hub.db"
    async with await open_store(path) as store:
        dep = await deploy(store)
        assert await grant(store, dep) is None
        changes = await read_all(store, "SELECT id, status FROM change ORDER BY id")
    url = postgres_server.new_database()
    await (await open_store(url)).aclose()  # migrated, empty
    conn = await asyncpg.connect(url)
    try:
        counts = await transfer(path, conn)
    finally:
        await conn.close()
    assert counts["deployment_sleep"] == 1
    async with await open_store(url) as store:
        assert await store.read(asleep_deployments) == [dep.id]
        assert (await shown(store, dep))[0] == "asleep"
        # The copy's triggers wrote nothing: the feed is the source's.
        moved = await read_all(store, "SELECT id, status FROM change ORDER BY id")
        assert [tuple(r) for r in moved] == [tuple(r) for r in changes]
