"""F7 with real processes: a sidecar dies between writing its new restore
record and renaming it into place; the old record is whole and it boots from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import read_restore_record, record_path
from runtime.testing import CRASH_EXIT_CODE
from tests.e2e.harness import recorder_source
from tests.support import wait_for
from tests.support.launch.starts import SIDECAR_START_TIMEOUT

from .harness.cluster import running_cluster

pytestmark = pytest.mark.anyio


async def test_f7_torn_record_write_leaves_the_old_record_to_boot_from(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        dep = await cluster.deploy("f7", recorder_source())
        record = record_path(cluster.sidecar_root / dep["id"], dep["id"])
        before = record.read_bytes()
        assert read_restore_record(record)[0].session_id is None

        # The first welcome makes the sidecar record its session: it dies there.
        node = await cluster.start_sidecar(
            dep["id"], failpoints="sidecar.record.before_rename=1*crash"
        )
        assert await node.proc.wait_exit(SIDECAR_START_TIMEOUT) == CRASH_EXIT_CODE
        assert record.read_bytes() == before
        (temp,) = record.parent.glob(".deployment.json.*.tmp")
        assert read_restore_record(temp)[0].session_id is not None  # complete, never renamed

        r = await cluster.send(dep["address"], "after the crash", message_id="f7-1")
        assert r.status_code == 202, r.text
        receipt = r.json()
        await cluster.start_sidecar(dep["id"])

        async def processed() -> Any:
            run = await cluster.run(receipt["run_id"])
            return run if run["state"].get("count") == 1 else None

        run = await wait_for(processed, what="the restarted sidecar to process the mail")
        assert [s["dispatch_id"] for s in run["state"]["seen"]] == [receipt["dispatch_id"]]
        # The sidecar writes its session to the record off the welcome's path
        # (sidecar._app: _keep_record): it may come after the mail is done.
        await wait_for(
            lambda: read_restore_record(record)[0].session_id is not None,
            what="the new session in the record",
        )
