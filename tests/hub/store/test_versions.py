"""Workflow versions in the hub's store: stamping, rollouts, their blobs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hub import Store
from hub._errors import DeploymentNotLive, UnknownVersion
from hub.store import collect_blobs, delete_deployment
from hub.store.versions import (
    VersionStatus,
    add_version,
    add_workflow_versions,
    finish_rollout,
    list_versions,
    pending_rollouts,
    request_rollout,
)
from runtime import Sources

from .test_accept import deploy, mail, query, running

pytestmark = pytest.mark.anyio

V2 = Sources(entrypoint="flow:main", files={"flow.py": "async def main(ctx, item): pass  # 2\n"})


async def versions(store: Store, dep: str) -> list[tuple[int, str, bool]]:
    return [(v.version, v.status, v.active) for v in await list_versions(store.db, dep)]


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
        async with store.write() as db:
            assert await add_version(db, dep, V2) == 2
        # Asked for, not loaded yet: still version 1.
        await acceptor.accept(mail("flow", subject="b"))
        assert [(r.deployment_id, r.version) for r in await pending_rollouts(store.db)] == [
            (dep, 2)
        ]
        async with store.write() as db:
            assert await finish_rollout(db, dep, 2, None)
        await acceptor.accept(mail("flow", subject="c"))
        assert await stamped(store) == [("a", 1), ("b", 1), ("c", 2)]
        assert await versions(store, dep) == [(1, "ready", False), (2, "ready", True)]
        assert await pending_rollouts(store.db) == []


async def test_a_refused_version_never_becomes_active(database: str) -> None:
    async with running(database) as (store, acceptor):
        dep = await deploy(store, "flow")
        async with store.write() as db:
            await add_version(db, dep, V2)
            assert await finish_rollout(db, dep, 2, "SyntaxError: invalid syntax")
        await acceptor.accept(mail("flow", subject="a"))
        assert await stamped(store) == [("a", 1)]
        [_, refused] = await list_versions(store.db, dep)
        assert (refused.status, refused.error) == (
            VersionStatus.REFUSED,
            "SyntaxError: invalid syntax",
        )


async def test_a_newer_request_supersedes_an_unfinished_rollout(database: str) -> None:
    async with running(database) as (store, _):
        dep = await deploy(store, "flow")
        v3 = Sources(entrypoint="flow:main", files={"flow.py": "async def main(c, i): pass  # 3\n"})
        async with store.write() as db:
            await add_version(db, dep, V2)
            await add_version(db, dep, v3)
            # The sidecar's late answer about version 2 changes nothing.
            assert not await finish_rollout(db, dep, 2, None)
        assert [r.version for r in await pending_rollouts(store.db)] == [3]
        assert await versions(store, dep) == [
            (1, "ready", True),
            (2, "superseded", False),
            (3, "loading", False),
        ]
        # Asking for the active version calls the rollout off.
        async with store.write() as db:
            assert not await request_rollout(db, dep, 1)
        assert await pending_rollouts(store.db) == []


async def test_the_deployment_names_its_active_versions_entrypoint(database: str) -> None:
    async with running(database) as (store, _):
        dep = await deploy(store, "flow")
        other = Sources(entrypoint="app:handle", files={"app.py": "async def handle(c, i): pass\n"})
        async with store.write() as db:
            await add_version(db, dep, other)
            await finish_rollout(db, dep, 2, None)
        assert await query(store, "SELECT entrypoint FROM deployment") == [("app:handle",)]
        async with store.write() as db:
            await request_rollout(db, dep, 1)
            await finish_rollout(db, dep, 1, None)
        assert await query(store, "SELECT entrypoint FROM deployment") == [("flow:main",)]


async def test_rollback_is_a_rollout_of_an_earlier_version(database: str) -> None:
    async with running(database) as (store, acceptor):
        dep = await deploy(store, "flow")
        async with store.write() as db:
            await add_version(db, dep, V2)
            await finish_rollout(db, dep, 2, None)
            assert await request_rollout(db, dep, 1)
        await acceptor.accept(mail("flow", subject="during"))
        async with store.write() as db:
            await finish_rollout(db, dep, 1, None)
        await acceptor.accept(mail("flow", subject="after"))
        assert await stamped(store) == [("during", 2), ("after", 1)]
        async with store.write() as db:
            with pytest.raises(UnknownVersion):
                await request_rollout(db, dep, 9)
        await delete_deployment(store, dep)
        async with store.write() as db:
            with pytest.raises(DeploymentNotLive):
                await add_version(db, dep, V2)


async def test_sources_are_kept_once_and_outlive_blob_collection(database: str) -> None:
    async with running(database) as (store, _):
        one, two = await deploy(store, "one"), await deploy(store, "two")
        async with store.write() as db:
            await add_version(db, one, V2)
            await add_version(db, two, V2)
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
        async with store.write() as db:
            # As a database from before versions had it.
            await db.execute("DELETE FROM deployment_version")
            await db.execute("DELETE FROM blob")
            await add_workflow_versions(db)
            await add_workflow_versions(db)  # idempotent
        digest = "sha256:" + hashlib.sha256(sources.encode()).hexdigest()
        assert await query(
            store, "SELECT deployment_id, version, digest, status FROM deployment_version"
        ) == [(dep, 1, digest, "ready")]
        assert await query(store, "SELECT digest, data FROM blob") == [(digest, sources.encode())]
