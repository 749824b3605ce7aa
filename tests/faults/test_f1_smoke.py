"""F1 with real processes: the hub crashes after the dispatch commit, before
the publish; restarted, it delivers the dispatch, processed exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.testing import CRASH_EXIT_CODE
from tests.e2e.harness import recorder_source
from tests.support import wait_for

from .harness.cluster import running_cluster

pytestmark = pytest.mark.anyio


async def test_f1_hub_crash_before_publish_then_restart_delivers_once(tmp_path: Path) -> None:
    async with running_cluster(
        tmp_path, hub_failpoints="hub.dispatch.before_publish=1*crash"
    ) as cluster:
        dep = await cluster.deploy("f1", recorder_source())
        # No sidecar yet, so nothing is published: the receipt comes back whole.
        r = await cluster.send(dep["address"], "one", message_id="f1-one")
        assert r.status_code == 202, r.text
        receipt = r.json()
        sidecar = await cluster.start_sidecar(dep["id"])

        # Its hello opens a lane; the first publish hits the failpoint.
        assert await cluster.hub.wait_exit() == CRASH_EXIT_CODE
        assert "failpoint hub.dispatch.before_publish: crash" in cluster.hub.log_path.read_text()
        status = "SELECT status FROM workflow_run_dispatch WHERE id = ?"
        assert cluster.query(status, receipt["dispatch_id"]) == [("reserved",)]

        await cluster.start_hub()  # this time without the failpoint

        async def processed() -> Any:
            run = await cluster.run(receipt["run_id"])
            return run if run["state"].get("count") == 1 else None

        async def settled() -> bool:
            return cluster.query(status, receipt["dispatch_id"]) == [("processed",)]

        run = await wait_for(processed, what="the run to process the dispatch")
        assert [s["dispatch_id"] for s in run["state"]["seen"]] == [receipt["dispatch_id"]]
        await wait_for(settled, what="the dispatch to be processed at the hub")
        # The sidecar rode it out: same process, reconnected by itself.
        assert sidecar.proc.running and sidecar.proc.exit_codes == []
        assert cluster.query("SELECT COUNT(*) FROM workflow_run WHERE is_top_level = 1") == [(1,)]
