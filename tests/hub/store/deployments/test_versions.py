"""Workflow versions in the hub's store: stamping, rollouts, their blobs."""

from __future__ import annotations

import hashlib
import sqlite3
from functools import partial
from pathlib import Path

import pytest

from hub import Store
from hub._errors import DeploymentNotLive, UnknownVersion
from hub.store import Tx, collect_blobs, delete_deployment
from hub.store.deployments.versions import (
    VersionStatus,
    add_version,
    add_workflow_versions,
    finish_rollout,
    list_versions,
    pending_rollouts,
    request_rollout,
)
from runtime import Sources

from ..accepting.test_accept import deploy, mail, query, running

pytestmark = pytest.mark.anyio

V2 = Sources(entrypoint="flow:main", files={"flow.py": "async def main(ctx, item): pass  # 2\n"})


async def versions(store: Store, dep: str) -> list[tuple[int, str, bool]]:
    found = await store.read(partial(list_versions, deployment_id=dep))
    return [(v.version, v.status, v.active) for v in found]


async def stamped(store: Store) -> list[tuple[str, int]]:
    return [
        (str(s), int(v))
        for s, v in await query(
            store, "SELECT subject, version FROM workflow_run_dispatch ORDER BY seq"
        )
    ]


async def test_each_dispatch_carries_the_version_active_when_it_was_accepted(database: str) -> None:
    async with running(database) as (store, acceptor):
        dep = await deploy(store, "flow")
        await acceptor.accept(mail("flow", subject="a"))
        assert await store.transact(partial(add_version, deployment_id=dep, sources=V2)) == 2
        # Asked for, not loaded yet: still version 1.
        await acceptor.accept(mail("flow", subject="b"))
        rollouts = await store.read(pending_rollouts)
        assert [(r.deployment_id, r.version) for r in rollouts] == [(dep, 2)]
        assert await store.transact(lambda tx: finish_rollout(tx, dep, 2, None))
        await acceptor.accept(mail("flow", subject="c"))
        assert await stamped(store) == [("a", 1), ("b", 1), ("c", 2)]
        assert await versions(store, dep) == [(1, "ready", False), (2, "ready", True)]
        assert await store.read(pending_rollouts) == []


async def test_a_refused_version_never_becomes_active(database: str) -> None:
    async with running(database) as (store, acceptor):
        dep = await deploy(store, "flow")

        def refused_v2(tx: Tx) -> bool:
            add_version(tx, dep, V2)
            return finish_rollout(tx, dep, 2, "SyntaxError: invalid syntax")

        assert await store.transact(refused_v2)
        await acceptor.accept(mail("flow", subject="a"))
        assert await stamped(store) == [("a", 1)]
        [_, refused] = await store.read(partial(list_versions, deployment_id=dep))
        assert (refused.status, refused.error) == (
            VersionStatus.REFUSED,
            "SyntaxError: invalid syntax",
        )


async def test_a_newer_request_supersedes_an_unfinished_rollout(database: str) -> None:
    async with running(database) as (store, _):
        dep = await deploy(store, "flow")
        v3 = Sources(entrypoint="flow:main", files={"flow.py": "async def main(c, i): pass  # 3\n"})

        def two_requests(tx: Tx) -> bool:
            add_version(tx, dep, V2)
            add_version(tx, dep, v3)
            # The sidecar's late answer about version 2 changes nothing.
            return finish_rollout(tx, dep, 2, None)

        assert not await store.transact(two_requests)
        assert [r.version for r in await store.read(pending_rollouts)] == [3]
        assert await versions(store, dep) == [
            (1, "ready", True),
            (2, "superseded", False),
            (3, "loading", False),
        ]
        # Asking for the active version calls the rollout off.
        assert not await store.transact(lambda tx: request_rollout(tx, dep, 1))
        assert await store.read(pending_rollouts) == []


async def test_the_deployment_names_its_active_versions_entrypoint(database: str) -> None:
    async with running(database) as (store, _):
        dep = await deploy(store, "flow")
        other = Sources(entrypoint="app:handle", files={"app.py": "async def handle(c, i): pass\n"})

        def roll_out(tx: Tx) -> None:
            add_version(tx, dep, other)
            finish_rollout(tx, dep, 2, None)

        def roll_back(tx: Tx) -> None:
            request_rollout(tx, dep, 1)
            finish_rollout(tx, dep, 1, None)

        await store.transact(roll_out)
        assert await query(store, "SELECT entrypoint FROM deployment") == [("app:handle",)]
        await store.transact(roll_back)
        assert await query(store, "SELECT entrypoint FROM deployment") == [("flow:main",)]


async def test_rollback_is_a_rollout_of_an_earlier_version(database: str) -> None:
    async with running(database) as (store, acceptor):
        dep = await deploy(store, "flow")

        def roll_out_and_back(tx: Tx) -> bool:
            add_version(tx, dep, V2)
            finish_rollout(tx, dep, 2, None)
            return request_rollout(tx, dep, 1)

        assert await store.transact(roll_out_and_back)
        await acceptor.accept(mail("flow", subject="during"))
        await store.transact(lambda tx: finish_rollout(tx, dep, 1, None))
        await acceptor.accept(mail("flow", subject="after"))
        assert await stamped(store) == [("during", 2), ("after", 1)]
        with pytest.raises(UnknownVersion):
            await store.transact(lambda tx: request_rollout(tx, dep, 9))
        await delete_deployment(store, dep)
        with pytest.raises(DeploymentNotLive):
            await store.transact(lambda tx: add_version(tx, dep, V2))


async def test_sources_are_kept_once_and_outlive_blob_collection(database: str) -> None:
    async with running(database) as (store, _):
        one, two = await deploy(store, "one"), await deploy(store, "two")

        def add_v2(tx: Tx) -> None:
            add_version(tx, one, V2)
            add_version(tx, two, V2)

        await store.transact(add_v2)
        await store.transact(collect_blobs)
        # Both deployments' version 1 share one blob, and both version 2 another.
        assert await query(store, "SELECT COUNT(*) FROM blob") == [(2,)]
        digests = await query(
            store, "SELECT COUNT(DISTINCT digest) FROM deployment_version WHERE version = 2"
        )
        assert digests == [(1,)]


async def test_the_migration_makes_each_deployments_code_its_version_1(tmp_path: Path) -> None:
    async with running(str(tmp_path / "hub.db")) as (store, _):
        dep = await deploy(store, "flow")
        [(sources,)] = await query(store, "SELECT sources FROM deployment")
    # As a database from before versions had it, migrated again (twice: idempotent).
    conn = sqlite3.connect(tmp_path / "hub.db", isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM deployment_version")
        conn.execute("DELETE FROM blob")
        add_workflow_versions(conn)
        add_workflow_versions(conn)
        conn.execute("COMMIT")
        digest = "sha256:" + hashlib.sha256(sources.encode()).hexdigest()
        assert [
            tuple(r)
            for r in conn.execute(
                "SELECT deployment_id, version, digest, status FROM deployment_version"
            )
        ] == [(dep, 1, digest, "ready")]
        assert [tuple(r) for r in conn.execute("SELECT digest, data FROM blob")] == [
            (digest, sources.encode())
        ]
    finally:
        conn.close()
