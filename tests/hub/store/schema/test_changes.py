"""The change feed's table (migration 11): triggers record every change of a
dispatch, a run and a deployment in the changing transaction, and nothing
else; trimming keeps the newest rows; ids never go back."""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path

import msgspec
import pytest

from hub import Accepted, Store, Trigger, accept_triggers
from hub.store import (
    Change,
    change_views,
    create_deployment,
    delete_deployment,
    get_deployment,
    get_dispatch,
    get_run,
    last_change_id,
    open_store,
    read_changes,
    trim_changes,
)
from hub.store.feed import add_change_feed
from hub.store.sql import Tx, sql
from tests.support.store import execute

pytestmark = pytest.mark.anyio


async def deploy(store: Store, name: str = "orders") -> str:
    created = await create_deployment(
        store, name=name, source="async def main(ctx, item): pass\n",
        domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
    )  # fmt: skip
    return created.deployment_id


async def accept(store: Store, address: str, subject: str) -> Accepted:
    trigger = Trigger(address=address, subject=subject, sender="a@b.c", body=b"x")
    outcomes, _ = await store.transact(partial(accept_triggers, triggers=[trigger]))
    (outcome,) = outcomes
    assert isinstance(outcome, Accepted), outcome
    return outcome


async def changes_after(store: Store, after: int, limit: int = 100) -> list[Change]:
    return await store.read(partial(read_changes, after=after, limit=limit))


async def feed(store: Store, after: int = 0) -> list[tuple[str, str, str | None]]:
    return [(c.kind, c.row_id, c.status) for c in await changes_after(store, after, 1000)]


_SET_STATUS = sql("UPDATE workflow_run_dispatch SET status = ? WHERE id = ?")
_SET_STATE = sql("UPDATE workflow_run SET state = '{\"n\": 1}', status = status WHERE id = ?")
_COMPLETE = sql("UPDATE workflow_run SET status = 'completed', result = '{\"n\": 1}' WHERE id = ?")


async def test_a_dispatch_run_and_deployment_are_recorded_step_by_step(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        dep = await deploy(store)
        first = await accept(store, "orders@mailrun.local", "one")

        def steps(tx: Tx) -> None:
            for status in ("delivered", "delivered", "processed"):  # the repeat is no change
                tx.execute(_SET_STATUS, (status, first.dispatch_id))
            # A run's state moves with every item; only status, result and error count.
            tx.execute(_SET_STATE, (first.run_id,))
            tx.execute(_COMPLETE, (first.run_id,))

        await store.transact(steps)
        assert await feed(store) == [
            ("deployment", dep, "deployed"),
            ("run", first.run_id, "running"),
            ("dispatch", first.dispatch_id, "reserved"),
            ("dispatch", first.dispatch_id, "delivered"),
            ("dispatch", first.dispatch_id, "processed"),
            ("run", first.run_id, "completed"),
        ]
        changes = await changes_after(store, 0)
        assert [c.id for c in changes] == list(range(1, 7))
        assert {c.deployment_id for c in changes} == {dep}

        # A deletion: the deployment, and what it cancels, in its transaction.
        other = await deploy(store, "billing")
        second = await accept(store, "billing@mailrun.local", "two")
        mark = await store.read(last_change_id)
        assert await delete_deployment(store, other)
        after = await feed(store, mark)
        assert ("deployment", other, "deleted") in after
        assert ("dispatch", second.dispatch_id, "cancelled") in after
        assert ("run", second.run_id, "cancelled") in after


async def test_the_views_are_the_rows_current_json_with_each_changes_status(
    tmp_path: Path,
) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        dep = await deploy(store)
        got = await accept(store, "orders@mailrun.local", "one")
        await execute(
            store, "UPDATE workflow_run_dispatch SET status = 'delivered' WHERE id = ?",
            got.dispatch_id,
        )  # fmt: skip
        views = await change_views(store, await changes_after(store, 0))
        dispatch = msgspec.to_builtins(
            await store.read(partial(get_dispatch, dispatch_id=got.dispatch_id))
        )
        run = msgspec.to_builtins(await store.read(partial(get_run, run_id=got.run_id)))
        deployment = msgspec.to_builtins(await store.read(partial(get_deployment, key=dep)))
        deployment.pop("oldest_wait")  # seconds waited: it grows between two reads
        assert [(c.kind, c.status) for c, _ in views] == [
            ("deployment", "deployed"), ("run", "running"),
            ("dispatch", "reserved"), ("dispatch", "delivered"),
        ]  # fmt: skip
        assert {k: v for k, v in views[0][1].items() if k != "oldest_wait"} == deployment
        assert views[1][1] == run
        assert views[2][1] == views[3][1] == dispatch  # current: delivered, both times


async def test_a_rolled_back_transaction_leaves_no_change(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        await deploy(store)
        before = await store.read(last_change_id)

        def crash(tx: Tx) -> None:
            accept_triggers(
                tx, [Trigger(address="orders@mailrun.local", subject="x", sender="a@b.c")]
            )
            raise RuntimeError("the crash before the commit")

        with pytest.raises(RuntimeError):
            await store.transact(crash)
        assert await store.read(last_change_id) == before
        assert await feed(store, before) == []
        got = await accept(store, "orders@mailrun.local", "y")
        # The next change takes the next id: no gap for a reader to mistake for trimming.
        assert [c.id for c in await changes_after(store, before, 10)] == [before + 1, before + 2]
        assert (await changes_after(store, before, 10))[-1].row_id == got.dispatch_id


async def test_trimming_keeps_the_newest_and_ids_keep_growing(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        await deploy(store)
        for i in range(20):
            await accept(store, "orders@mailrun.local", f"m{i}")
        last = await store.read(last_change_id)
        assert last == 22  # the deployment, its run, 20 dispatches
        assert await trim_changes(store, 10, chunk=3) == 12
        assert [c.id for c in await changes_after(store, 0)] == list(range(13, 23))
        assert await trim_changes(store, 10) == 0  # within bounds: nothing to do
        assert await trim_changes(store, 0) == 10
        assert await changes_after(store, 0) == []
        assert await store.read(last_change_id) == 22  # never reused
        await accept(store, "orders@mailrun.local", "after")
        assert [c.id for c in await changes_after(store, 0)] == [23]


async def test_the_migration_is_idempotent_on_its_own(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "hub.db") as store:
        conn = sqlite3.connect(tmp_path / "hub.db", isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            add_change_feed(conn)
            conn.execute("COMMIT")
        finally:
            conn.close()
        await deploy(store)
        assert len(await feed(store)) == 1  # one trigger each, not two
