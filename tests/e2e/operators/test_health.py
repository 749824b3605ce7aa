"""Health tells the truth: a stopped sidecar shows in /healthz and `mailrun deployments`."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import nats
import pytest

from runtime import FrameDecoder, Ping, Pong, encode
from tests.support import free_port, wait_for

from .. import harness
from ..harness import MAILRUN, Up, mailrun_up, recorder_source

pytestmark = pytest.mark.anyio


async def listed(up: Up, deployment_id: str) -> dict[str, Any]:
    """The deployment as `mailrun deployments --json` prints it."""
    done = await anyio.run_process([MAILRUN, "deployments", "--json", *up.hub_options])
    [dep] = [d for d in json.loads(done.stdout)["deployments"] if d["id"] == deployment_id]
    return dict(dep)


def session_of(health: dict[str, Any], deployment_id: str) -> dict[str, Any]:
    [row] = [s for s in health["sessions"] if s["deployment_id"] == deployment_id]
    return dict(row)


async def test_the_sidecar_answers_a_probe_without_storing_anything(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("probed", recorder_source())
        warm = (await up.send(dep["address"], "warm-up")).json()
        await up.wait_state(warm["run_id"], lambda r: r["state"].get("count") == 1)
        health = await up.healthz()
        assert health is not None
        session = session_of(health, dep["id"])
        nc = await nats.connect(health["nats_url"], nkeys_seed_str=up.hub_seed)  # as the hub
        try:
            reply = await nc.request(
                f"mailrun.mail.inbound.{dep['id']}",
                encode(Ping(session_id=session["session_id"])),
                timeout=5,
            )
        finally:
            await nc.close()
        pong = FrameDecoder[Pong](Pong).decode(reply.data)
        assert pong.deployment_id == dep["id"]
        # Answered before the inbox: only the warm-up is there, nothing dead-lettered.
        db = sqlite3.connect(f"file:{dep_inbox(up, dep['id'])}?mode=ro", uri=True)
        try:
            assert db.execute("SELECT COUNT(*) FROM inbox").fetchone() == (1,)
            assert db.execute("SELECT COUNT(*) FROM dead_letter").fetchone() == (0,)
        finally:
            db.close()


def dep_inbox(up: Up, deployment_id: str) -> Path:
    return up.state_dir / "sidecars" / deployment_id / "workflow-runs" / deployment_id / "inbox.db"


async def test_a_stopped_sidecar_is_reported_until_it_drains(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("frozen", recorder_source())
        dep_id = dep["id"]
        warm = (await up.send(dep["address"], "warm-up")).json()
        await up.wait_state(warm["run_id"], lambda r: r["state"].get("count") == 1)
        before = await up.healthz()
        assert before is not None and session_of(before, dep_id)["connected"] is True

        pid = await up.sidecar_pid(dep_id)
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(5):
                assert (await up.send(dep["address"], f"m{i}")).status_code == 202

            async def stuck() -> dict[str, Any] | None:
                """Health once it reports the deployment undeliverable, its sidecar
                gone, with all five mails counted and a failed delivery noted
                (counts lag by up to a census interval, the error by a round)."""
                health = await up.healthz()
                found = [
                    u["deployment_id"]
                    for u in (health or {}).get("undeliverable", [])
                    if not u["connected"] and u["pending"] == 5 and u["last_error"]
                ]
                return health if found == [dep_id] else None

            health = await wait_for(stuck, what="the sidecar reported gone, its work stuck")
            [entry] = health["undeliverable"]
            assert (entry["pending"], entry["connected"]) == (5, False)
            assert entry["last_error"] and entry["oldest_wait"] > 0
            assert health["status"] == "degraded" and health["connected_sidecars"] == 0
            assert session_of(health, dep_id)["connected"] is False

            async def waited_longer() -> bool:
                health = await stuck()
                return health is not None and (
                    health["undeliverable"][0]["oldest_wait"] > entry["oldest_wait"]
                )

            await wait_for(waited_longer, what="the oldest wait to grow")

            async def shown_later() -> dict[str, Any] | None:
                shown = await listed(up, dep_id)
                return shown if shown["oldest_wait"] > entry["oldest_wait"] else None

            shown = await wait_for(shown_later, what="`mailrun deployments` to show the wait")
            assert (shown["connected"], shown["pending"]) == (False, 5) and shown["last_error"]
        finally:
            os.kill(pid, signal.SIGCONT)

        await up.wait_state(warm["run_id"], lambda r: r["state"].get("count") == 6)

        async def clean() -> tuple[dict[str, Any], dict[str, Any]] | None:
            health = await up.healthz()
            if health is None or health["status"] != "ok" or health["pending"]:
                return None  # pending counts lag by up to a census interval (1 s)
            if not session_of(health, dep_id)["connected"]:
                return None
            # The lane forgets its last error when it next looks and finds
            # nothing to send: after its backoff (up to 2 s), not at once.
            shown = (await up.http.get(f"/workflows/deployments/{dep_id}")).json()
            return (health, shown) if shown["last_error"] is None else None

        health, shown = await wait_for(clean, what="health to be clean again")
        assert health["connected_sidecars"] == 1 and health["undeliverable"] == []
        assert (shown["connected"], shown["pending"], shown["oldest_wait"]) == (True, 0, 0.0)
        assert await up.sidecar_pid(dep_id) == pid, "the same process drained its work"


async def test_up_on_a_port_another_process_holds_is_never_taken_for_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A port found free can be taken before up starts (a bench or a demo
    # beside the suite): up refuses it, and the harness starts it again on
    # another, rather than talking to the stranger that holds it.
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", free_port()))
        stranger.listen()
        held = stranger.getsockname()[1]
        chosen = iter([held])
        monkeypatch.setattr(harness, "free_port", lambda: next(chosen, None) or free_port())
        async with mailrun_up(tmp_path) as up:
            assert up.url != f"http://127.0.0.1:{held}"
            assert up.announced()
            dep = await up.deploy("ours", recorder_source())  # our token: our hub
            accepted = (await up.send(dep["address"], "hello")).json()
            await up.wait_state(accepted["run_id"], lambda r: r["state"].get("count") == 1)
