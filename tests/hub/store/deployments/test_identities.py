"""NATS identities of deployments: minted at creation, and given at the hub's
boot to older deployments whose restore record the hub wrote."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from hub.natsauth import new_user_key, public_key
from hub.store import Store, create_deployment, give_nats_identities, open_store
from runtime import read_restore_record, record_path
from runtime import write_restore_record as write_record
from runtime.sidecar_contract import decode_restore_record
from runtime.wire import unb64url
from tests.support.store import execute, rows

pytestmark = pytest.mark.anyio


async def created(store: Store, root: Path, name: str) -> str:
    made = await create_deployment(
        store,
        name=name,
        source="async def main(ctx, item):\n    pass\n",
        domain="mailrun.local",
        nats_url="nats://127.0.0.1:4222",
        subject_prefix="mailrun",
        sidecar_root=root,
    )
    return made.deployment_id


async def nats_user(store: Store, dep: str) -> str | None:
    ((user,),) = await rows(store, "SELECT nats_user FROM deployment WHERE id = ?", dep)
    return user  # type: ignore[no-any-return]


def record_file(root: Path, dep: str) -> Path:
    return record_path(root / dep, dep)


async def test_a_new_deployment_has_its_own_identity_and_only_its_record_has_the_seed(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path / "hub.db")
    try:
        made = await create_deployment(
            store,
            name="flow",
            source="async def main(ctx, item):\n    pass\n",
            domain="mailrun.local",
            nats_url="nats://127.0.0.1:4222",
            subject_prefix="mailrun",
            sidecar_root=tmp_path / "sidecars",
        )
        dep = made.deployment_id
        record, _ = read_restore_record(record_file(tmp_path / "sidecars", dep))
        joined, _ = decode_restore_record(unb64url(made.join_token))
        assert record.nats_seed is not None and joined.nats_seed == record.nats_seed
        assert await nats_user(store, dep) == public_key(record.nats_seed)
        other = await created(store, tmp_path / "sidecars", "other")
        assert await nats_user(store, other) != await nats_user(store, dep)
    finally:
        await store.aclose()
    assert record.nats_seed.encode() not in (tmp_path / "hub.db").read_bytes()


async def test_older_local_deployments_get_an_identity_at_boot_once(tmp_path: Path) -> None:
    root = tmp_path / "sidecars"
    store = await open_store(tmp_path / "hub.db")
    try:
        local, remote, crashed, deleted = [
            await created(store, root, n) for n in ("local", "remote", "crashed", "deleted")
        ]
        # As an earlier release left them: no identity in the row nor in the record.
        await execute(store, "UPDATE deployment SET nats_user = NULL")
        await execute(store, "UPDATE deployment SET deleted_at = 1 WHERE id = ?", deleted)
        for dep in (local, deleted):
            record, _ = read_restore_record(record_file(root, dep))
            write_record(record_file(root, dep), msgspec.structs.replace(record, nats_seed=None))
        record_file(root, remote).unlink()  # its sidecar runs elsewhere
        # A boot that wrote the seed into the record and crashed before the row:
        half = new_user_key()
        record, _ = read_restore_record(record_file(root, crashed))
        half_done = msgspec.structs.replace(record, nats_seed=half.seed)
        write_record(record_file(root, crashed), half_done)

        assert await give_nats_identities(store, root) == 2
        record, _ = read_restore_record(record_file(root, local))
        assert record.nats_seed is not None
        assert await nats_user(store, local) == public_key(record.nats_seed)
        assert await nats_user(store, crashed) == half.public  # the seed it already had
        assert await nats_user(store, remote) is None  # nobody to hand the seed to
        assert await nats_user(store, deleted) is None  # and none for a deleted one
        assert read_restore_record(record_file(root, deleted))[0].nats_seed is None
        assert await give_nats_identities(store, root) == 0
        assert read_restore_record(record_file(root, local))[0].nats_seed == record.nats_seed
    finally:
        await store.aclose()
