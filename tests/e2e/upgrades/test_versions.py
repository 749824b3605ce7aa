"""Workflow versions under `mailrun up`: an update under a stream of mail, a
refused version, a rollback, and a rollout through kills of sidecar and hub."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.support import wait_for

from ..harness import Up, mailrun, mailrun_up

pytestmark = pytest.mark.anyio

# Each item records which version's code handled it; version 2 also records
# the versions it upgraded the state from (migrate_state).
FLOW = """
{prelude}
TAG = {tag}


async def main(ctx, item):
    ctx.state.setdefault("seen", []).append([item.subject, TAG])
    ctx.state["count"] = ctx.state.get("count", 0) + 1
{extra}
"""
MIGRATE = """

async def migrate_state(state, from_version):
    state["migrated_from"] = state.get("migrated_from", []) + [from_version]
    return state
"""


def flow(tag: int, *, migrate: bool = False, prelude: str = "") -> str:
    return FLOW.format(tag=tag, extra=MIGRATE if migrate else "", prelude=prelude)


async def send_all(up: Up, address: str, subjects: list[str], deadline: float) -> list[Any]:
    """Send each mail until accepted (a message id per mail makes a retry
    count once), through hub restarts; the receipts in order."""
    receipts = []
    with anyio.fail_after(deadline):
        for subject in subjects:
            while True:
                try:
                    answer = await up.send(address, subject, message_id=f"<{subject}@test>")
                except httpx.HTTPError:
                    answer = None
                if answer is not None and answer.status_code == 202:
                    receipts.append(answer.json())
                    break
                await anyio.sleep(0.05)  # the hub is restarting: try again
    return receipts


async def processed(up: Up, run_id: str, count: int) -> dict[str, Any]:
    return await up.wait_state(run_id, lambda r: r["state"].get("count") == count, timeout=60)


def check_versions(up: Up, run: dict[str, Any], receipts: list[Any]) -> list[int]:
    """Every mail handled once, in order, by the version stamped on its
    dispatch (which the hub recorded as the one that processed it)."""
    seen = run["state"]["seen"]
    assert [s for s, _ in seen] == [f"m{i}" for i in range(len(receipts))]
    tags = [tag for _, tag in seen]
    recorded = [
        up.query("SELECT version FROM workflow_run_dispatch WHERE id = ?", rc["dispatch_id"])[0][0]
        for rc in receipts
    ]
    assert tags == recorded
    return tags


async def test_update_refuse_and_roll_back_under_a_stream_of_mail(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("versioned", flow(1))
        receipts = await send_all(up, dep["address"], [f"m{i}" for i in range(5)], 30)
        run_id = receipts[0]["run_id"]
        await processed(up, run_id, 5)

        # Update while mail streams in: the CLI returns once v2 is active.
        v2 = tmp_path / "v2.py"
        v2.write_text(flow(2, migrate=True))
        subjects = [f"m{i}" for i in range(5, 45)]
        async with anyio.create_task_group() as tg:
            streamed: list[Any] = []

            async def stream() -> None:
                streamed.extend(await send_all(up, dep["address"], subjects, 60))

            tg.start_soon(stream)
            code, out = await mailrun(up, "deploy", str(v2), "--name", "versioned", "--update")
            assert code == 0, out
            assert "version 2: active" in out
        receipts += streamed
        receipts += await send_all(up, dep["address"], ["m45", "m46"], 30)
        run = await processed(up, run_id, 47)
        tags = check_versions(up, run, receipts)
        # One switch point: version 1 up to it, version 2 after, both used.
        switch = tags.index(2)
        assert set(tags[:switch]) == {1} and set(tags[switch:]) == {2}, tags
        assert run["state"]["migrated_from"] == [1]  # once, on the first v2 item
        assert {rc["run_id"] for rc in receipts} == {run_id}
        view = (await up.http.get(f"/workflows/deployments/{dep['id']}")).json()
        assert (view["id"], view["address"], view["version"]) == (dep["id"], dep["address"], 2)

        # Broken versions are refused before they become active.
        broken = tmp_path / "broken.py"
        for text, why in (("async def main(ctx, item)\n", "SyntaxError"), ("X = 1\n", "main")):
            broken.write_text(text)
            code, out = await mailrun(up, "deploy", str(broken), "--name", "versioned", "--update")
            assert code != 0 and "version_refused" in out and why in out, out
        receipts += await send_all(up, dep["address"], ["m47"], 30)
        run = await processed(up, run_id, 48)
        assert check_versions(up, run, receipts)[-1] == 2

        # Rollback: items accepted from now on are version 1's again.
        code, out = await mailrun(up, "rollback", "versioned", "--to", "1")
        assert code == 0 and "version 1: active" in out, out
        receipts += await send_all(up, dep["address"], ["m48", "m49"], 30)
        run = await processed(up, run_id, 50)
        assert check_versions(up, run, receipts)[-3:] == [2, 1, 1]

        code, out = await mailrun(up, "versions", "versioned", "--json")
        listing = json.loads(out)["versions"]
        assert [(v["version"], v["status"], v["active"]) for v in listing] == [
            (1, "ready", True),
            (2, "ready", False),
            (3, "refused", False),
            (4, "refused", False),
        ]


async def test_a_rollout_completes_through_kills_of_sidecar_and_hub(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("rolled", flow(1))
        receipts = await send_all(up, dep["address"], ["m0"], 30)
        run_id = receipts[0]["run_id"]
        await processed(up, run_id, 1)
        sidecar = await up.sidecar_pid(dep["id"])
        hub = await up.hub_pid()

        async with anyio.create_task_group() as tg:
            streamed: list[Any] = []

            async def stream() -> None:
                subjects = [f"m{i}" for i in range(1, 41)]
                streamed.extend(await send_all(up, dep["address"], subjects, 90))

            tg.start_soon(stream)
            # Loading v2 takes a while (its import sleeps): the kills land
            # while its rollout is asked for and not finished.
            slow = flow(2, migrate=True, prelude="import time\ntime.sleep(0.5)\n")
            answer = await up.http.post(
                "/workflows/deployments/rolled/versions?wait=0", json={"source": slow}
            )
            assert answer.status_code == 202 and answer.json()["status"] == "loading"
            os.kill(sidecar, signal.SIGKILL)
            os.kill(hub, signal.SIGKILL)

            async def rolled_out() -> bool:
                try:
                    answer = await up.http.get(f"/workflows/deployments/{dep['id']}")
                except httpx.HTTPError:
                    return False
                return answer.status_code == 200 and answer.json()["version"] == 2

            await wait_for(rolled_out, timeout=60, what="version 2 active after the kills")
        receipts += streamed
        receipts += await send_all(up, dep["address"], ["m41"], 30)
        run = await processed(up, run_id, 42)
        tags = check_versions(up, run, receipts)
        switch = tags.index(2)
        assert set(tags[:switch]) == {1} and set(tags[switch:]) == {2}, tags
        assert run["state"]["migrated_from"] == [1]
        assert up.query(
            "SELECT COUNT(*), COUNT(DISTINCT message_id) FROM workflow_run_dispatch"
            " WHERE deployment_id = ? AND status = 'processed'",
            dep["id"],
        ) == [(42, 42)]
