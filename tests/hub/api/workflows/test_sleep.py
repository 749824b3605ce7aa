"""Scale to zero over HTTP, on a real hub (``serve_hub``: its wire side on an
in-memory bus, its HTTP server on a real socket): an asleep deployment is
shown ``asleep`` with ``asleep_since`` (``paused`` first), counted in
``/metrics`` and ``/healthz`` without degrading anything; its mail is
accepted and ``GET /workflows/wakes`` (``AsyncHubClient.wakes``) names it,
at once or as soon as the mail comes during a long poll; the feed records
its fall and its wake; a Welcome wakes it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from hub import HubSettings, serve_hub
from hub._client import AsyncHubClient
from hub.cli.tables import deployment_view, deployments_table
from runtime import Subjects, Welcome, new_id
from runtime.testing import MemoryBus
from runtime.wire import Asleep, Sleep
from tests.support import wait_for
from tests.support.harnesses.wire import Dep, Sidecar, deploy
from tests.support.harnesses.wire import Hub as WireHub
from tests.support.store import rows

from ..harness import assert_error

pytestmark = pytest.mark.anyio

TOKEN = "admin-token-of-the-sleep-tests-0123456"


@dataclass
class Hub:
    http: httpx.AsyncClient
    client: AsyncHubClient
    wire: WireHub  # what a scripted sidecar needs: the bus, the subjects, the store

    async def view(self, dep: Dep) -> dict[str, Any]:
        r = await self.http.get(f"/workflows/deployments/{dep.id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def metric(self, name: str) -> float:
        text = (await self.http.get("/metrics")).text
        return next(float(line.split()[1]) for line in text.splitlines() if line.startswith(name))


@asynccontextmanager
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    bus = MemoryBus()
    config = HubSettings(state_dir=tmp_path, http_port=0, admin_token=TOKEN)
    async with anyio.create_task_group() as tg:
        handle = await tg.start(lambda task_status: serve_hub(
            config, transport=bus.connect("hub"), task_status=task_status
        ))  # fmt: skip
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx.AsyncClient(base_url=handle.http_url, headers=headers, timeout=10) as http,
            AsyncHubClient(handle.http_url, token=TOKEN, timeout=5) as client,
        ):
            wire = WireHub(handle.store, bus, bus.connect("x"), Subjects(), None, handle.boot_id)  # type: ignore[arg-type]
            yield Hub(http, client, wire)
        tg.cancel_scope.cancel()


async def fall_asleep(h: Hub, dep: Dep) -> Sidecar:
    car = Sidecar(h.wire, dep, own=True)
    assert isinstance(await car.hello(), Welcome)
    session_id, epoch = car.session
    frame = Sleep(deployment_id=dep.id, session_id=session_id, owner_epoch=epoch)
    assert isinstance(await car.request(car.subjects.sleep, frame), Asleep)
    return car


async def test_an_asleep_deployment_is_shown_counted_and_woken_by_its_mail(
    tmp_path: Path,
) -> None:
    async with hub(tmp_path) as h:
        dep, awake = await deploy(h.wire.store, "sleepy"), await deploy(h.wire.store, "awake")
        assert (await h.view(dep))["asleep_since"] is None
        await fall_asleep(h, dep)
        view = await h.view(dep)
        assert view["status"] == "asleep" and isinstance(view["asleep_since"], float)
        assert view["connected"] is False
        listed = await h.http.get("/workflows/deployments?status=asleep")
        assert [d["id"] for d in listed.json()["deployments"]] == [dep.id]
        live = await h.http.get("/workflows/deployments?status=deployed")
        assert {d["id"] for d in live.json()["deployments"]} == {dep.id, awake.id}
        assert await h.metric("mailrun_deployments_asleep ") == 1
        # The console and mailrun's deployment view show it.
        page = await h.http.get(f"/console/deployments/{dep.id}", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "<dd>asleep" in page.text, page.text[:500]
        shown = deployment_view(view)
        assert "asleep" in shown and "asleep_since" in shown
        assert "asleep" in deployments_table([view])
        health = (await h.http.get("/healthz")).json()
        assert (health["status"], health["asleep_deployments"]) == ("ok", 1)
        assert health["disconnected_sidecars"] == 0
        # Nothing to do: the wakes are empty at once, and after a short wait.
        assert await h.client.wakes(0) == []
        with anyio.fail_after(5):
            assert await h.client.wakes(0.2) == []
        # A long poll is answered as soon as the mail is accepted.
        polled: list[list[str]] = []

        async def poll() -> None:
            polled.append(await h.client.wakes(25))

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            r = await h.http.post("/mail", json={"to": dep.address, "subject": "wake up"})
            assert r.status_code == 202, r.text
            with anyio.fail_after(5):
                await wait_for(lambda: polled, what="the long poll's answer")
        assert polled == [[dep.id]]
        assert await h.client.wakes(0) == [dep.id]
        # Paused is shown first; unpaused, it is asleep again.
        assert (await h.http.post(f"/workflows/deployments/{dep.id}/pause")).json()[
            "status"
        ] == "paused"
        assert (await h.http.post(f"/workflows/deployments/{dep.id}/unpause")).json()[
            "status"
        ] == "asleep"
        # Its sidecar is back: awake, and no longer named.
        again = Sidecar(h.wire, dep, own=True, instance_id=new_id("ins"))
        assert isinstance(await again.hello(takeover=True), Welcome)
        view = await h.view(dep)
        assert (view["status"], view["asleep_since"]) == ("deployed", None)
        assert await h.client.wakes(0) == []
        assert await h.metric("mailrun_deployments_asleep ") == 0
        # The feed followed it: asleep, paused, asleep again, then awake.
        changes = await rows(
            h.wire.store,
            "SELECT status FROM change WHERE kind = 'deployment' AND row_id = ? ORDER BY id",
            dep.id,
        )
        assert [c[0] for c in changes][-4:] == ["asleep", "paused", "asleep", "deployed"]


async def test_a_wait_out_of_range_is_refused(tmp_path: Path) -> None:
    async with hub(tmp_path) as h:
        for wait in ("31", "-1", "soon", "nan"):
            assert_error(await h.http.get(f"/workflows/wakes?wait={wait}"), 422, "invalid_request")
        answer = (await h.http.get("/workflows/wakes")).json()
        assert answer["wake"] == [] and isinstance(answer["cursor"], str)
        async with httpx.AsyncClient(base_url=str(h.http.base_url)) as anonymous:
            assert (await anonymous.get("/workflows/wakes")).status_code == 401


async def test_a_poll_with_a_cursor_waits_for_news_not_for_the_names_it_was_given(
    tmp_path: Path,
) -> None:
    async with hub(tmp_path) as h:
        first, second = await deploy(h.wire.store, "first"), await deploy(h.wire.store, "second")
        await fall_asleep(h, first)
        await fall_asleep(h, second)
        r = await h.http.post("/mail", json={"to": first.address, "subject": "wake up"})
        assert r.status_code == 202, r.text
        named, cursor = await h.client.wakes_after(0, None)
        assert named == [first.id] and cursor is not None
        # Named already, and nothing new: the poll waits all of its time
        # (the caller is starting it), then says what it names still.
        began = anyio.current_time()
        with anyio.fail_after(5):
            assert await h.client.wakes_after(0.5, cursor) == ([first.id], cursor)
        assert anyio.current_time() - began >= 0.45
        # Work for another comes during the poll: answered as soon as accepted.
        polled: list[tuple[list[str], str | None]] = []

        async def poll() -> None:
            polled.append(await h.client.wakes_after(25, cursor))

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await anyio.wait_all_tasks_blocked()  # the poll waits: nothing new to answer
            assert not polled
            began = anyio.current_time()
            r = await h.http.post("/mail", json={"to": second.address, "subject": "me too"})
            assert r.status_code == 202, r.text
            with anyio.fail_after(5):
                await wait_for(lambda: polled, what="the long poll's answer")
        assert anyio.current_time() - began < 2
        ((named, after),) = polled
        assert named == [first.id, second.id] and after not in (None, cursor)
        # A cursor this hub did not give (another hub's, a restarted one's,
        # or none at all) is no cursor: what it names is answered at once.
        for other in ("0123abcd.1", "nonsense", "x" * 500, ""):
            with anyio.fail_after(5):
                assert (await h.client.wakes_after(25, other))[0] == [first.id, second.id]
