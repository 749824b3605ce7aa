"""A deployment's local sidecar files: written at create, removed after delete
unless a sidecar still runs from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub import Store, delete_deployment
from hub.store import create_deployment, open_store
from runtime import record_path
from sidecar._home import Home

pytestmark = pytest.mark.anyio


async def deploy(store: Store, root: Path, name: str) -> str:
    created = await create_deployment(
        store, name=name, source="async def main(ctx, item): pass\n", domain="mailrun.local",
        nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun", sidecar_root=root,
    )  # fmt: skip
    return created.deployment_id


async def test_delete_removes_the_local_sidecar_dir_and_its_key(tmp_path: Path) -> None:
    root = tmp_path / "sidecars"
    async with await open_store(tmp_path / "hub.db") as store:
        dep = await deploy(store, root, "flow")
        other = await deploy(store, root, "other")
        assert record_path(root / dep, dep).is_file()
        assert await delete_deployment(store, dep, sidecar_root=root)
    assert not (root / dep).exists()
    assert record_path(root / other, other).is_file()  # only that deployment's


async def test_a_running_sidecars_dir_is_left_to_whoever_stops_it(tmp_path: Path) -> None:
    root = tmp_path / "sidecars"
    async with await open_store(tmp_path / "hub.db") as store:
        dep = await deploy(store, root, "flow")
        with Home(record_path(root / dep, dep).parent):  # the sidecar runs
            assert await delete_deployment(store, dep, sidecar_root=root)
            assert record_path(root / dep, dep).is_file()
