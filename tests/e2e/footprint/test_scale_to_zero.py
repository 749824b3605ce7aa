"""Scale to zero end to end: real `mailrun up --idle-stop 0.5` (hub, sidecars,
nats-server as OS processes).

An idle deployment falls asleep: shown ``asleep``, no sidecar process, no
NATS connection but the hub's. A mail to it is accepted (202) and processed
exactly once by a sidecar ``up`` starts again, which falls asleep again; a
timer due while it sleeps wakes it the same way. A run waiting for an
approval, with a mail held, lets it sleep; the decision over HTTP wakes it
and the run completes, each item processed once. A sidecar started by hand
with a join token is never put to sleep. With ``--max-awake 2``, six asleep
deployments mailed at once are each processed once, never by more than two
sidecar processes at a time, and all fall asleep again. With ``--max-awake
1``, a deployment whose sidecar exits at once leaves the slot to another
one's mail while it waits out its restart's backoff.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from runtime import record_path
from tests.support import command_words, wait_for

from ..harness import Up, mailrun_up, read_json

pytestmark = pytest.mark.anyio

IDLE = "0.5"
"""up's ``--idle-stop``: each fall asleep the tests wait for is this, then
up's stop of the sidecar."""

# Records which process handled each item; "timer N" sets a timer due in N s.
SLEEPY = """
import os


async def main(ctx, item):
    seen = ctx.state.setdefault("seen", [])
    name = item.name if item.kind == "timer" else item.subject
    seen.append({"name": name, "dispatch_id": item.dispatch_id, "pid": os.getpid()})
    ctx.state["count"] = len(seen)
    if item.kind == "mail" and item.subject.startswith("timer "):
        ctx.set_timer("due", after=float(item.subject.split()[1]))
"""


def sidecars(up: Up, dep_id: str | None = None) -> list[int]:
    """The pids of ``up``'s sidecar processes (of ``dep_id`` only, with it)."""
    found = []
    for child in up.children():
        try:
            argv = command_words(child)
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if "sidecar" in argv and (dep_id is None or dep_id in argv):
            found.append(child.pid)
    return found


def nats_clients(up: Up) -> set[int]:
    """The pids of the processes connected to ``up``'s embedded NATS server."""
    port = int(read_json(up.state_dir / "up.json")["nats_url"].rsplit(":", 1)[1])
    return {
        c.pid
        for c in psutil.net_connections("tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED and c.pid
    }


async def status(up: Up, dep_id: str) -> str:
    r = await up.http.get(f"/workflows/deployments/{dep_id}")
    assert r.status_code == 200, r.text
    return str(r.json()["status"])


async def asleep(up: Up, dep_id: str, timeout: float = 30) -> None:
    """Wait until ``dep_id`` is shown asleep and its sidecar process is gone."""

    async def check() -> bool:
        return await status(up, dep_id) == "asleep" and not sidecars(up, dep_id)

    await wait_for(check, timeout=timeout, what=f"{dep_id} asleep with no sidecar")


async def mail(up: Up, dep: dict[str, Any], subject: str) -> str:
    r = await up.send(dep["address"], subject, message_id=f"<{subject}.{dep['id']}@test>")
    assert r.status_code == 202, r.text
    return str(r.json()["run_id"])


async def seen(up: Up, run_id: str, count: int, timeout: float = 30) -> list[dict[str, Any]]:
    run = await up.wait_state(
        run_id, lambda r: r["state"].get("count", 0) >= count, timeout=timeout, what=f"{count}"
    )
    items: list[dict[str, Any]] = run["state"]["seen"]
    return items


async def test_an_idle_deployment_sleeps_and_mail_or_a_timer_wakes_it(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path, "--idle-stop", IDLE) as up:
        dep = await up.deploy("sleepy", SLEEPY)
        first = await up.sidecar_pid(dep["id"])
        await asleep(up, dep["id"])
        hub = await up.hub_pid()
        assert nats_clients(up) <= {hub}, "a NATS connection besides the hub's"

        run_id = await mail(up, dep, "hello")
        items = await seen(up, run_id, 1)
        assert [i["name"] for i in items] == ["hello"] and items[0]["pid"] != first
        await asleep(up, dep["id"])

        # A timer due while it sleeps wakes it; nothing is processed twice.
        # Due 3 s after the idle time: up's stop of the sidecar comes first.
        await mail(up, dep, "timer 3.5")
        await seen(up, run_id, 2)
        await asleep(up, dep["id"])
        assert (await up.run(run_id))["state"]["count"] == 2  # asleep, the timer pending
        items = await seen(up, run_id, 3)
        assert [i["name"] for i in items] == ["hello", "timer 3.5", "due"]
        assert len({i["dispatch_id"] for i in items}) == 3
        await asleep(up, dep["id"])
        assert (await up.run(run_id))["state"]["count"] == 3


async def test_a_sidecar_started_by_hand_with_a_join_token_is_never_put_to_sleep(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path, "--idle-stop", IDLE) as up:
        dep = await up.deploy("byhand", SLEEPY)
        await asleep(up, dep["id"])
        # Its own host, its own state dir; no --idle-stop: always on.
        nats_url = read_json(up.state_dir / "up.json")["nats_url"]
        home, log = tmp_path / "elsewhere", tmp_path / "elsewhere.log"
        argv = [sys.executable, "-m", "sidecar", "--state-dir", str(home)]
        argv += ["--join", dep["join_token"], "--nats", nats_url, "--takeover"]
        with log.open("wb") as out:
            hand = await anyio.open_process(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            # Welcomed: the deployment is awake, its sidecar this one.
            await wait_for(lambda: _awake(up, dep["id"]), what="the hand-started sidecar welcomed")
            run_id = await mail(up, dep, "one")
            items = await seen(up, run_id, 1)
            assert items[0]["pid"] == hand.pid
            # Two idle times later (up's own fall asleep within one) it still
            # runs, the deployment awake: only time passing shows it.
            for _ in range(4):
                await anyio.sleep(float(IDLE) / 2)  # idle on purpose: nothing to wait for
                assert hand.returncode is None, log.read_text(errors="replace")[-3000:]
                assert await status(up, dep["id"]) != "asleep"
            run_id = await mail(up, dep, "two")
            assert [i["pid"] for i in await seen(up, run_id, 2)] == [hand.pid] * 2
            # up runs none of its own beside it (one it started finds it owned elsewhere).
            await wait_for(lambda: not sidecars(up, dep["id"]), what="no sidecar of up's")
        finally:
            hand.kill()
            await hand.wait()


async def _awake(up: Up, dep_id: str) -> bool:
    r = await up.http.get(f"/workflows/deployments/{dep_id}")
    view = r.json()
    return bool(view["status"] == "deployed" and view.get("connected"))


async def test_a_storm_of_wakes_drains_through_max_awake_slots(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path, "--idle-stop", IDLE, "--max-awake", "2") as up:
        deps = [await up.deploy(f"storm{n}", SLEEPY) for n in range(6)]
        for dep in deps:
            await asleep(up, dep["id"], timeout=60)
        most = 0
        done = anyio.Event()

        async def sample() -> None:
            nonlocal most
            while not done.is_set():
                most = max(most, len(sidecars(up)))
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sample)
            runs: list[str] = []

            async def send(dep: dict[str, Any]) -> None:
                runs.append(await mail(up, dep, "storm"))

            async with anyio.create_task_group() as senders:
                for dep in deps:
                    senders.start_soon(send, dep)
            for run_id in runs:
                items = await seen(up, run_id, 1, timeout=60)
                assert [i["name"] for i in items] == ["storm"]
            for dep in deps:
                await asleep(up, dep["id"], timeout=60)
            done.set()
        assert 1 <= most <= 2, most
        for run_id in runs:  # still once each, everything settled
            run = await up.run(run_id)
            assert run["state"]["count"] == 1, json.dumps(run["state"])


# Waits for an approval on "gate"; "done" completes the run.
GATED = """
import os


async def main(ctx, item):
    seen = ctx.state.setdefault("seen", [])
    seen.append({"kind": item.kind, "dispatch_id": item.dispatch_id, "pid": os.getpid()})
    if item.kind == "mail" and item.subject == "gate":
        ctx.state["approval"] = await ctx.request_approval("ship it?")
    if item.kind == "mail" and item.subject == "done":
        ctx.complete(len(seen))
"""


async def test_a_run_waiting_for_an_approval_sleeps_and_the_decision_wakes_it(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path, "--idle-stop", IDLE) as up:
        dep = await up.deploy("gated", GATED)
        run_id = await mail(up, dep, "gate")
        run = await up.wait_state(run_id, lambda r: r["status"] == "waiting")
        # Held by the waiting run, in the sidecar's inbox: no reason to stay awake.
        await mail(up, dep, "done")
        await asleep(up, dep["id"])
        run = await up.run(run_id)
        assert run["status"] == "waiting" and len(run["state"]["seen"]) == 1

        decision = {"decision": "approve"}
        r = await up.http.post(f"/approvals/{run['state']['approval']}", json=decision)
        assert r.status_code == 202, r.text
        run = await up.wait_state(run_id, lambda r: r["status"] == "completed", timeout=30)
        kinds = [i["kind"] for i in run["state"]["seen"]]
        assert kinds == ["mail", "approval", "mail"], kinds
        assert len({i["dispatch_id"] for i in run["state"]["seen"]}) == 3  # each once
        assert run["state"]["seen"][1]["pid"] != run["state"]["seen"][0]["pid"]  # woken
        await asleep(up, dep["id"])
        dispatches = up.query(
            "SELECT status FROM workflow_run_dispatch WHERE run_id = ? ORDER BY seq", run_id
        )
        assert dispatches == [("processed",)] * 3, dispatches


async def test_a_sidecar_that_crashes_at_once_leaves_its_slot_to_the_others(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path, "--idle-stop", IDLE, "--max-awake", "1") as up:
        broken, fine = [await up.deploy(name, SLEEPY) for name in ("broken", "fine")]
        for dep in (broken, fine):
            await asleep(up, dep["id"])
        # An unreadable restore record: its sidecar exits 2 at once, every start.
        state = up.state_dir / "sidecars" / broken["id"]
        record_path(state, broken["id"]).write_text("{not json")
        log = tmp_path / "up.log"

        def crashes() -> int:
            return log.read_text().count(f"sidecar-{broken['id']} exited with 2")

        await mail(up, broken, "lost")
        await wait_for(lambda: crashes() >= 2, what="the broken sidecar crash-looping")
        # Its backoff's slot goes to the one waiting: its mail is processed.
        run_id = await mail(up, fine, "hello")
        items = await seen(up, run_id, 1)
        assert [i["name"] for i in items] == ["hello"]
        await asleep(up, fine["id"])
        # The broken one queues for the slot again, and crashes on.
        before = crashes()
        await wait_for(lambda: crashes() > before, what="the broken sidecar started again")
        assert (await up.run(run_id))["state"]["count"] == 1
