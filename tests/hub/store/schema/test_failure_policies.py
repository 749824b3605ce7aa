"""Migration 16 and the store's failure-policy rows: a database the previous
release left (schema 15) keeps its data and gives every deployment the
default policy; a deployment created with a policy keeps it; a policy
change that is not valid writes nothing."""

from __future__ import annotations

import sqlite3
import time
from functools import partial
from pathlib import Path

import pytest

from hub._errors import DispatchNotParked, InvalidPolicy, RunNotSuspended
from hub.store import (
    Accepted,
    PolicyChange,
    Trigger,
    accept_triggers,
    create_deployment,
    get_deployment,
    get_dispatch,
    get_run,
    list_parked,
    open_store,
    pending_migrations,
    read_policy,
    read_state_page,
    resume_run,
    retry_dispatch,
    set_policy,
)
from hub.store.sql import Tx
from hub.wire.events.ingest import Ingest
from hub.wire.retention import DeadLetters
from runtime import DispatchProcessed, new_id
from runtime.wire import FailurePolicy, RunSuspended
from tests.support.harnesses.wire import deploy
from tests.support.store import migrations_from

pytestmark = pytest.mark.anyio

# What migration 16 added, and the order to take it away in (indexes first).
_ADDED = (
    "DROP INDEX workflow_run_suspended",
    "DROP INDEX dispatch_parked",
    "ALTER TABLE deployment DROP COLUMN on_failure",
    "ALTER TABLE deployment DROP COLUMN max_attempts",
    "ALTER TABLE deployment DROP COLUMN max_backoff",
    "ALTER TABLE deployment DROP COLUMN handler_timeout",
    "ALTER TABLE workflow_run DROP COLUMN suspended_at",
    "ALTER TABLE workflow_run DROP COLUMN failing_dispatch_id",
    "ALTER TABLE workflow_run_dispatch DROP COLUMN error",
    "UPDATE schema_version SET version = 15",
)


async def test_a_schema_15_database_keeps_its_data_and_gets_the_default_policy(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hub.db"
    async with await open_store(path) as store:
        dep = await deploy(store)
        (receipt,), _ = await store.transact(
            partial(accept_triggers, triggers=[Trigger(address=dep.address, body=b"kept")])
        )
    # As the previous release left it: the same rows, without what 16 adds.
    conn = sqlite3.connect(path)
    with conn:
        for statement in _ADDED:
            conn.execute(statement)
    conn.close()
    assert await pending_migrations(path) == migrations_from("0016_failure_policies")

    async with await open_store(path) as store:
        view = await store.read(partial(get_deployment, key=dep.id))
        assert (view.on_failure, view.max_attempts, view.max_backoff, view.handler_timeout) == (
            "suspend", 5, 60.0, 300.0,
        )  # fmt: skip
        assert await store.read(partial(read_policy, deployment_id=dep.id)) == FailurePolicy()
        run = await store.read(partial(get_run, run_id=receipt.run_id))
        assert (run.status, run.suspended_at, run.failing_dispatch_id) == ("running", None, None)
        dispatch = await store.read(partial(get_dispatch, dispatch_id=receipt.dispatch_id))
        assert (dispatch.seq, dispatch.status, dispatch.error) == (1, "reserved", None)
        assert (view.address, view.next_seq) == (dep.address, 2)
    assert await pending_migrations(path) == []


async def test_a_policy_is_kept_as_created_and_a_bad_change_writes_nothing(
    database: str,
) -> None:
    async with await open_store(database) as store:
        created = await create_deployment(
            store, name="flow", source="async def main(ctx, item): pass\n",
            domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
            policy=PolicyChange(on_failure="fail", max_attempts=100, max_backoff=0.0),
        )  # fmt: skip
        dep_id = created.deployment_id
        given = FailurePolicy(on_failure="fail", max_attempts=100, max_backoff=0.0)
        assert await store.read(partial(read_policy, deployment_id=dep_id)) == given
        with pytest.raises(InvalidPolicy, match="handler_timeout"):
            change = PolicyChange(on_failure="park", handler_timeout=86400.5)
            await store.transact(partial(set_policy, deployment_id=dep_id, change=change))
        assert await store.read(partial(read_policy, deployment_id=dep_id)) == given
        change = PolicyChange(handler_timeout=0.1)
        after = await store.transact(partial(set_policy, deployment_id=dep_id, change=change))
        assert after == FailurePolicy(
            on_failure="fail", max_attempts=100, max_backoff=0.0, handler_timeout=0.1
        )


async def test_parked_retried_and_suspended_resumed_on_either_database(database: str) -> None:
    async with await open_store(database) as store:
        dep = await deploy(store)
        triggers = [Trigger(address=dep.address, body=b"%d" % i) for i in range(2)]
        (first, second), _ = await store.transact(partial(accept_triggers, triggers=triggers))
        park = DispatchProcessed(
            event_id=new_id("evt"), run_id=first.run_id, dispatch_id=first.dispatch_id,
            seq=1, step=1, outcome="parked", error="ValueError: x",
        )  # fmt: skip

        def apply(tx: Tx) -> None:
            Ingest(tx, dep.id, "events", time.time(), DeadLetters()).events(
                [park, suspension(second)]
            )

        await store.transact(apply)
        assert [d.id for d in await store.read(list_parked)] == [first.dispatch_id]
        retried = await store.transact(partial(retry_dispatch, dispatch_id=first.dispatch_id))
        assert (retried.deployment_id, retried.seq) == (dep.id, 3)
        with pytest.raises(DispatchNotParked):
            await store.transact(partial(retry_dispatch, dispatch_id=first.dispatch_id))
        run = await store.read(partial(get_run, run_id=second.run_id))
        assert (run.status, run.failing_dispatch_id) == ("suspended", second.dispatch_id)
        resume_id = await store.transact(partial(resume_run, run_id=second.run_id))
        resume = await store.read(partial(get_dispatch, dispatch_id=resume_id))
        assert (resume.kind, resume.seq, resume.status) == ("resume", 4, "reserved")
        assert (await store.read(partial(get_run, run_id=second.run_id))).status == "running"
        with pytest.raises(RunNotSuspended):
            await store.transact(partial(resume_run, run_id=second.run_id))


def suspension(receipt: Accepted) -> RunSuspended:
    return RunSuspended(
        event_id=new_id("evt"), run_id=receipt.run_id, dispatch_id=receipt.dispatch_id,
        error="RuntimeError: y",
    )  # fmt: skip


async def test_a_new_owner_is_told_a_retried_dispatchs_old_seq_is_settled(database: str) -> None:
    async with await open_store(database) as store:
        dep = await deploy(store)
        triggers = [Trigger(address=dep.address, body=b"%d" % i) for i in range(4)]
        receipts, _ = await store.transact(partial(accept_triggers, triggers=triggers))
        held, failing, done, _ = receipts  # seq 1 stays open (a suspended run holds it)
        events = [
            DispatchProcessed(
                event_id=new_id("evt"),
                run_id=r.run_id,
                dispatch_id=r.dispatch_id,
                seq=r.seq,
                step=r.seq,
                outcome=outcome,
                error=error,
            )
            for r, outcome, error in ((failing, "parked", "E"), (done, "processed", ""))
        ]
        await store.transact(
            lambda tx: Ingest(tx, dep.id, "events", time.time(), DeadLetters()).events(events)
        )
        await store.transact(partial(retry_dispatch, dispatch_id=failing.dispatch_id))  # -> 5
        page = await store.read(
            partial(read_state_page, deployment_id=dep.id, after_run_id="", runs=10, settled=100)
        )
        # Seq 2 has no dispatch now: nothing will ever be sent at it.
        assert (page.floor_seq, page.settled) == (0, [2, 3])
        page = await store.read(
            partial(read_state_page, deployment_id=dep.id, after_run_id="", runs=10, settled=1)
        )
        assert page.settled == [2]
        del held
