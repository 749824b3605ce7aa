"""A state too large to ship ends in its deployment's failure policy, visibly
and at once (no retries: the same call makes the same state), through real
processes: the run fails under ``fail``, is suspended under ``suspend``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime.wire import MAX_STATE, encoded_size

from ..harness import mailrun_up, recorder_source

pytestmark = pytest.mark.anyio

BIG = 3_000_000

GROWER = f"""
async def main(ctx, item):
    if item.subject == "grow":
        ctx.state = {{"blob": "x" * {BIG}}}
        return
    ctx.state["count"] = ctx.state.get("count", 0) + 1
"""


@pytest.mark.parametrize("policy", ["fail", "suspend"])
async def test_a_3mb_state_ends_in_the_policy_and_nothing_else_stops(
    tmp_path: Path, policy: str
) -> None:
    async with mailrun_up(tmp_path) as up:
        big = await up.deploy("grower", GROWER, on_failure=policy)
        ended = "failed" if policy == "fail" else "suspended"
        steady = await up.deploy("steady", recorder_source())
        first = (await up.send(big["address"], "hello")).json()
        run_id = first["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("count") == 1)
        sidecar = await up.sidecar_pid(big["id"])

        grow = await up.send(big["address"], "grow")
        assert grow.status_code == 202, grow.text
        sent_at = anyio.current_time()

        # The other deployment keeps processing throughout: one mail after
        # another, each processed within seconds, until the big run has failed
        # and a few more after that.
        failed: dict[str, Any] | None = None
        steady_run, i, last = "", 0, 0
        while failed is None or i < last:
            i += 1
            receipt = (await up.send(steady["address"], f"steady {i}")).json()
            steady_run = receipt["run_id"]
            await up.wait_state(steady_run, lambda r, i=i: r["state"].get("count") == i, timeout=5)
            if failed is None:
                run = await up.run(run_id)
                if run["status"] == ended:
                    failed, last = run, i + 3
                else:
                    assert anyio.current_time() - sent_at < 10, f"the run not {ended} in 10 s"

        size = encoded_size({"blob": "x" * BIG})
        assert failed["error"] == (
            f"LimitExceeded: ctx.state is {size} bytes encoded,"
            f" over the limit {MAX_STATE.name} = {MAX_STATE.bytes} bytes"
        )
        assert failed["state"] == {"count": 1}  # the too-large state was never committed

        rows = up.query(
            "SELECT seq, status FROM workflow_run_dispatch WHERE deployment_id = ? ORDER BY seq",
            big["id"],
        )
        late = await up.send(big["address"], "too late")
        if policy == "fail":
            # Later mail to the failed run is refused at the hub, and every
            # dispatch of the grower is settled: none waits for a redelivery.
            assert late.status_code == 409
            assert late.json()["reason"] == "workflow_run_terminal"
            assert rows == [(1, "processed"), (2, "processed")]
        else:
            # The suspended run takes later mail and holds it, with the item
            # that failed, for a fix.
            assert late.status_code == 202, late.text
            assert failed["failing_dispatch_id"] == grow.json()["dispatch_id"]
            assert rows == [(1, "processed"), (2, "delivered")]

        # No crash loop and no hello storm: the same sidecar process, welcomed
        # a handful of times at most (once, unless a hello was slow).
        assert await up.sidecar_pid(big["id"]) == sidecar
        log = (up.state_dir / "logs" / "hub.log").read_text()
        welcomes = re.findall(rf"welcome {big['id']} ", log)
        assert 1 <= len(welcomes) <= 3, len(welcomes)
        assert (await up.run(steady_run))["status"] == "running"
