"""A handler's own bug under `mailrun up`: a poison mail under each failure
policy, a handler that kills its process, a sidecar killed mid-item.

Each test proves both sides: nothing accepted is lost or handled twice, and
once the fault is healed (a fixed version, a resume, a retry) everything
settles, in order."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime import SidecarExit
from tests.support import wait_for

from ..harness import Up, mailrun, mailrun_up, run_status, send_accepted

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# ``BROKEN`` decides whether the poison subjects hurt: version 1 has the bug,
# the fixed version does not.
FLOW = """
import os
from pathlib import Path

BROKEN = {broken}
MARK = {mark!r}
EXIT = {exit}


async def main(ctx, item):
    if BROKEN and item.subject == "boom":
        raise RuntimeError("boom is poison")
    if BROKEN and item.subject == "exit":
        os._exit(EXIT)
    if BROKEN and item.subject == "hang" and MARK:
        Path(MARK).write_text(item.dispatch_id)
        while True:
            import anyio
            await anyio.sleep(0.05)
    ctx.state.setdefault("seen", []).append(item.subject)
"""


def flow(*, broken: bool, mark: Path | None = None, exit: int = 1) -> str:
    return FLOW.format(broken=broken, mark=None if mark is None else str(mark), exit=exit)


async def deploy(up: Up, name: str, source: str, **policy: Any) -> Any:
    answer = await up.http.post(
        "/workflows/deployments",
        json={"name": name, "source": source, "entrypoint": "flow:main", **policy},
    )
    assert answer.status_code == 201, answer.text
    deployment = answer.json()
    for key, value in policy.items():
        assert deployment[key] == value
    return deployment


async def seen(up: Up, run_id: str, subjects: list[str], timeout: float = 60) -> Any:
    return await up.wait_state(
        run_id,
        lambda r: r["state"].get("seen") == subjects,
        timeout=timeout,
        what=f"the run to have seen {subjects}",
    )


def dispatch_statuses(up: Up, deployment_id: str) -> dict[str, str]:
    rows = up.query(
        "SELECT subject, status FROM workflow_run_dispatch WHERE deployment_id = ?"
        " AND kind = 'mail'",
        deployment_id,
    )
    return dict(rows)


async def test_suspend_holds_later_mail_and_a_fixed_version_resumes_in_order(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await deploy(
            up, "suspends", flow(broken=True), on_failure="suspend", max_attempts=3, max_backoff=0.2
        )
        first = await send_accepted(up, dep["address"], "m0")
        run_id = first["run_id"]
        await seen(up, run_id, ["m0"])
        boom = await send_accepted(up, dep["address"], "boom")
        run = await run_status(up, run_id, "suspended")
        assert run["failing_dispatch_id"] == boom["dispatch_id"]
        assert "boom is poison" in run["error"] and run["suspended_at"] > 0

        # Mail keeps being accepted, and held: nothing bounces, nothing runs.
        later = [await send_accepted(up, dep["address"], s) for s in ("m1", "m2")]
        assert {r["run_id"] for r in later} == {run_id}
        health = await up.healthz()
        assert health is not None and health["status"] == "degraded"
        answer = await up.http.post(f"/runs/{run_id}/resume")
        assert answer.status_code == 200  # a resume without a fix: it fails again
        await run_status(up, run_id, "suspended")
        assert (await up.run(run_id))["state"]["seen"] == ["m0"]

        # The fix: a new version resumes the run by itself.
        fixed = tmp_path / "fixed.py"
        fixed.write_text(flow(broken=False))
        code, out = await mailrun(up, "deploy", str(fixed), "--name", "suspends", "--update")
        assert code == 0, out
        run = await seen(up, run_id, ["m0", "boom", "m1", "m2"])
        assert run["status"] == "running" and run["failing_dispatch_id"] is None
        await send_accepted(up, dep["address"], "m3")
        await seen(up, run_id, ["m0", "boom", "m1", "m2", "m3"])
        assert set(dispatch_statuses(up, dep["id"]).values()) == {"processed"}
        answer = await up.http.post(f"/runs/{run_id}/resume")
        assert answer.status_code == 409 and answer.json()["reason"] == "run_not_suspended"


async def test_park_sets_the_item_aside_and_a_retry_processes_it_once(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await deploy(
            up, "parks", flow(broken=True), on_failure="park", max_attempts=2, max_backoff=0.1
        )
        run_id = (await send_accepted(up, dep["address"], "m0"))["run_id"]
        boom = await send_accepted(up, dep["address"], "boom")
        await send_accepted(up, dep["address"], "m1")
        run = await seen(up, run_id, ["m0", "m1"])
        assert run["status"] == "running"
        parked = (await up.http.get("/dispatches", params={"status": "parked"})).json()
        assert [d["id"] for d in parked["dispatches"]] == [boom["dispatch_id"]]
        assert "boom is poison" in parked["dispatches"][0]["error"]
        code, out = await mailrun(up, "parked", "--deployment", "parks")
        assert code == 0 and boom["dispatch_id"] in out, out

        answer = await up.http.post(
            "/workflows/deployments/parks/versions", json={"source": flow(broken=False)}
        )
        assert answer.status_code == 201, answer.text
        code, out = await mailrun(up, "retry", boom["dispatch_id"])
        assert code == 0, out
        await seen(up, run_id, ["m0", "m1", "boom"])
        again = await up.http.post(f"/dispatches/{boom['dispatch_id']}/retry")
        assert again.status_code == 409 and again.json()["reason"] == "dispatch_not_parked"
        await send_accepted(up, dep["address"], "m2")
        await seen(up, run_id, ["m0", "m1", "boom", "m2"])
        assert set(dispatch_statuses(up, dep["id"]).values()) == {"processed"}


async def test_fail_is_todays_behaviour_on_request(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await deploy(
            up, "fails", flow(broken=True), on_failure="fail", max_attempts=2, max_backoff=0.1
        )
        run_id = (await send_accepted(up, dep["address"], "m0"))["run_id"]
        await send_accepted(up, dep["address"], "boom")
        run = await run_status(up, run_id, "failed")
        assert "boom is poison" in run["error"]
        answer = await up.send(dep["address"], "m1")
        assert answer.status_code == 409 and answer.json()["reason"] == "workflow_run_terminal"


@pytest.mark.parametrize(
    "code", [1, SidecarExit.OWNER_CONFLICT], ids=["exit-1", "exit-as-if-owned-elsewhere"]
)
async def test_a_handler_that_kills_its_process_ends_in_the_policy(
    tmp_path: Path, code: int
) -> None:
    """Whatever code the workflow exits with (even one that means "owned
    elsewhere" to `up`), it is a crash: restarted, and an attempt."""
    async with mailrun_up(tmp_path) as up:
        dep = await deploy(
            up,
            "exits",
            flow(broken=True, exit=code),
            on_failure="suspend",
            max_attempts=2,
            max_backoff=0.1,
        )
        run_id = (await send_accepted(up, dep["address"], "m0"))["run_id"]
        await seen(up, run_id, ["m0"])
        first = await up.sidecar_pid(dep["id"])
        doomed = await send_accepted(up, dep["address"], "exit")
        await send_accepted(up, dep["address"], "m1")
        run = await run_status(up, run_id, "suspended", timeout=90)
        assert run["failing_dispatch_id"] == doomed["dispatch_id"]
        assert first != await up.sidecar_pid(dep["id"])  # it did die

        # Suspended, the sidecar stays up: no crash loop.
        steady = await up.sidecar_pid(dep["id"])
        fixed = await up.http.post(
            "/workflows/deployments/exits/versions", json={"source": flow(broken=False)}
        )
        assert fixed.status_code == 201, fixed.text
        await seen(up, run_id, ["m0", "exit", "m1"])
        assert steady == await up.sidecar_pid(dep["id"])


async def test_a_sidecar_killed_mid_item_counts_an_attempt(tmp_path: Path) -> None:
    mark = tmp_path / "in-handler"
    async with mailrun_up(tmp_path) as up:
        dep = await deploy(
            up,
            "killed",
            flow(broken=True, mark=mark),
            on_failure="suspend",
            max_attempts=2,
            max_backoff=0.1,
        )
        run_id = (await send_accepted(up, dep["address"], "m0"))["run_id"]
        await seen(up, run_id, ["m0"])
        hang = await send_accepted(up, dep["address"], "hang")
        for _ in range(2):
            await wait_for(mark.exists, timeout=60, what="the handler to be inside the item")
            pid = await up.sidecar_pid(dep["id"])
            mark.unlink()
            os.kill(pid, signal.SIGKILL)
        run = await run_status(up, run_id, "suspended", timeout=90)
        assert run["failing_dispatch_id"] == hang["dispatch_id"]
        assert not mark.exists()  # no third call

        code, out = await mailrun(up, "resume", run_id)
        assert code == 0 and "running" in out, out
        # Resumed without a fix: the handler is called again (a third time).
        await wait_for(mark.exists, timeout=60, what="the resumed item's call")


async def test_a_suspended_run_holds_through_kills_of_hub_and_sidecar(tmp_path: Path) -> None:
    """Suspended, then the hub and the sidecar SIGKILLed, mail sent while
    they come back: nothing accepted is lost, the run is still suspended,
    and the fix settles everything, once, in order."""
    async with mailrun_up(tmp_path) as up:
        dep = await deploy(
            up, "enduring", flow(broken=True), on_failure="suspend", max_attempts=2, max_backoff=0.1
        )
        run_id = (await send_accepted(up, dep["address"], "m0"))["run_id"]
        boom = await send_accepted(up, dep["address"], "boom")
        await run_status(up, run_id, "suspended")
        await send_accepted(up, dep["address"], "m1")
        sidecar, hub = await up.sidecar_pid(dep["id"]), await up.hub_pid()
        os.kill(sidecar, signal.SIGKILL)
        os.kill(hub, signal.SIGKILL)

        async def accepted(subject: str) -> bool:
            try:
                answer = await up.send(dep["address"], subject, message_id=f"<{subject}@test>")
            except httpx.HTTPError:
                return False
            return answer.status_code == 202

        await wait_for(lambda: accepted("m2"), timeout=60, what="mail accepted after the kills")
        assert sidecar != await up.sidecar_pid(dep["id"])
        run = await run_status(up, run_id, "suspended")
        assert run["failing_dispatch_id"] == boom["dispatch_id"]
        assert run["state"]["seen"] == ["m0"]

        fixed = await up.http.post(
            "/workflows/deployments/enduring/versions", json={"source": flow(broken=False)}
        )
        assert fixed.status_code == 201, fixed.text
        await seen(up, run_id, ["m0", "boom", "m1", "m2"])
        assert set(dispatch_statuses(up, dep["id"]).values()) == {"processed"}
