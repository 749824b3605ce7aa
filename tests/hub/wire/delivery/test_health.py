"""Health that tells the truth: connected means answering, stuck work is named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from hub.wire.delivery.dispatcher import DispatchConfig
from hub.wire.delivery.health import HealthConfig
from hub.wire.service import WireConfig
from runtime import Ack, Backoff, MailInbound
from tests.support import wait_for
from tests.support.harnesses.wire import Hub, Inbox, Sidecar, accept, deploy, running_hub, served

# slow: every test waits out the health checks' silence thresholds
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FAST = WireConfig(
    dispatch=DispatchConfig(request_timeout=0.2, backoff=Backoff(0.05, 0.2), census_interval=0.05),
    health=HealthConfig(
        stale_after=0.6, probe_after=0.2, probe_timeout=0.2, undeliverable_after=30.0
    ),
)


def stored(frame: MailInbound) -> Ack:
    return Ack(dispatch_id=frame.dispatch_id, result="stored")


def session_of(hub: Hub, dep_id: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = hub.wire.health()["sessions"]
    [row] = [s for s in rows if s["deployment_id"] == dep_id]
    return row


async def test_an_idle_sidecar_is_probed_and_stays_connected(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        car, inbox, _ = await served(hub, tg)
        dep, welcome = car.dep, car.welcome
        assert welcome is not None

        # Four probes take longer than stale_after: only their answers keep it connected.
        await wait_for(lambda: len(inbox.pings) >= 4)
        row = session_of(hub, dep.id)
        assert row["connected"] is True and row["silence"] < 0.6
        assert row["session_id"] == welcome.session_id and row["owner_epoch"] == 1
        assert row["instance_id"] == car.instance_id and row["last_seen"] > row["since"] - 1
        health = hub.wire.health()
        assert (health["connected_sidecars"], health["disconnected_sidecars"]) == (1, 0)
        assert health["status"] == "ok" and health["undeliverable"] == []
        assert inbox.frames == [], "a probe is no mail"
        assert {p.session_id for p in inbox.pings} == {welcome.session_id}
        assert hub.wire.deployment_health(dep.id) == {
            "connected": True,
            "last_error": None,
            "stuck": 0,
        }
        tg.cancel_scope.cancel()


async def test_a_silent_sidecar_turns_disconnected_and_its_work_undeliverable(
    tmp_path: Path,
) -> None:
    # A long backoff: only the answered probe's kick can explain a quick drain.
    config = WireConfig(
        dispatch=DispatchConfig(request_timeout=0.2, backoff=Backoff(30, 30), census_interval=0.05),
        health=FAST.health,
    )
    async with running_hub(tmp_path, config=config) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        # Stopped: answers nothing at all.
        car, inbox = Sidecar(hub, dep), Inbox(answer=lambda f: None, ping_answer=lambda p: None)
        await tg.start(inbox.serve, car)
        await car.hello()
        await accept(hub, dep, [b"a", b"b", b"c"])

        def undeliverable() -> list[dict[str, Any]]:
            return list(hub.wire.health()["undeliverable"])

        await wait_for(lambda: bool(undeliverable()))
        [stuck] = undeliverable()
        assert stuck["deployment_id"] == dep.id and stuck["pending"] == 3
        assert stuck["connected"] is False and "timed out" in stuck["last_error"]
        health = hub.wire.health()
        assert health["status"] == "degraded" and health["connected_sidecars"] == 0
        assert session_of(hub, dep.id)["silence"] >= 0.6
        first_wait = stuck["oldest_wait"]
        await wait_for(lambda: hub.wire.health()["pending"][dep.id]["oldest_age"] > first_wait)
        live = hub.wire.deployment_health(dep.id)
        assert live["connected"] is False and "timed out" in live["last_error"]

        inbox.answer, inbox.ping_answer = stored, Inbox().ping_answer  # back (SIGCONT)
        with anyio.fail_after(5):
            await wait_for(lambda: hub.wire.health()["pending"] == {})
        health = hub.wire.health()
        assert health["status"] == "ok" and health["undeliverable"] == []
        assert health["connected_sidecars"] == 1
        assert hub.wire.deployment_health(dep.id) == {
            "connected": True,
            "last_error": None,
            "stuck": 0,
        }
        rows = await hub.all("SELECT status FROM workflow_run_dispatch")
        assert [r["status"] for r in rows] == ["delivered"] * 3
        tg.cancel_scope.cancel()


async def test_work_without_any_sidecar_session_is_undeliverable_after_a_while(
    tmp_path: Path,
) -> None:
    config = WireConfig(
        dispatch=FAST.dispatch,
        health=HealthConfig(stale_after=0.6, probe_after=0.2, undeliverable_after=0.3),
    )
    async with running_hub(tmp_path, config=config) as hub:
        dep = await deploy(hub.store)
        await accept(hub, dep, [b"a"])
        # Young work without a sidecar is a sidecar still starting, not a problem.
        await wait_for(lambda: dep.id in hub.wire.health()["pending"])
        assert hub.wire.health()["undeliverable"] == []

        await wait_for(lambda: hub.wire.health()["undeliverable"])
        [stuck] = hub.wire.health()["undeliverable"]
        assert (stuck["pending"], stuck["connected"]) == (1, False)
        assert stuck["last_error"] == "no sidecar session" and stuck["oldest_wait"] > 0.3
        assert hub.wire.deployment_health(dep.id) == {
            "connected": False,
            "last_error": None,
            "stuck": 0,
        }
