"""``GET /events`` on a real hub (``serve_hub`` on an in-memory bus, its HTTP
server on a real socket: httpx's ASGI transport would buffer a stream whole)."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import msgspec
import pytest

from hub import HubSettings, serve_hub
from hub.api import EventLimits
from hub.store import Store, last_change_id, trim_changes
from runtime.testing import MemoryBus
from tests.support import wait_for
from tests.support.events import Stream, open_stream
from tests.support.store import execute

from .harness import SOURCE, assert_error

# slow: every test serves event streams from a hub over real HTTP connections
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOKEN = "admin-token-of-the-event-tests-0123456"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
FAST = EventLimits(poll_interval=0.02)


@dataclass
class Hub:
    url: str
    http: httpx.AsyncClient
    store: Store

    async def deploy(self, name: str) -> dict[str, Any]:
        r = await self.http.post("/workflows/deployments", json={"name": name, "source": SOURCE})
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def send(self, name: str, subject: str = "hi") -> dict[str, Any]:
        r = await self.http.post("/mail", json={"to": f"{name}@mailrun.local", "subject": subject})
        assert r.status_code == 202, r.text
        return dict(r.json())

    async def metric(self, name: str) -> int:
        text = (await self.http.get("/metrics")).text
        return next(int(line.split()[1]) for line in text.splitlines() if line.startswith(name))

    async def streams(self, n: int) -> bool:
        return await self.metric("mailrun_event_streams ") == n


@asynccontextmanager
async def hub(tmp_path: Path, limits: EventLimits = FAST) -> AsyncIterator[Hub]:
    config = HubSettings(state_dir=tmp_path, http_port=0, admin_token=TOKEN, events=limits)
    async with anyio.create_task_group() as tg:
        handle = await tg.start(lambda task_status: serve_hub(
            config, transport=MemoryBus().connect("hub"), task_status=task_status
        ))  # fmt: skip
        async with httpx.AsyncClient(base_url=handle.http_url, headers=BEARER, timeout=10) as http:
            yield Hub(handle.http_url, http, handle.store)
        tg.cancel_scope.cancel()


@asynccontextmanager
async def stream(h: Hub, path: str = "/events", **headers: str) -> AsyncIterator[Stream]:
    async with open_stream(h.http, path, **headers) as events:
        yield events


async def test_a_dispatchs_changes_stream_as_mail_is_accepted(tmp_path: Path) -> None:
    async with hub(tmp_path) as h:
        await h.deploy("orders")
        async with stream(h) as events:
            got = await h.send("orders", "one")
            assert await events.take(2) == [
                ("run", got["run_id"], "running"),
                ("dispatch", got["dispatch_id"], "reserved"),
            ]
            await execute(
                h.store,
                "UPDATE workflow_run_dispatch SET status = 'delivered' WHERE id = ?",
                got["dispatch_id"],
            )
            event = await events.next()
            data = msgspec.json.decode(event.data[0])
            assert (event.kind, data["status"], data["change"]["status"]) == (
                "dispatch", "delivered", "delivered",
            )  # fmt: skip
            # The view is GET /dispatches/{id}'s, with the change's status beside it.
            current = (await h.http.get(f"/dispatches/{got['dispatch_id']}")).json()
            assert {k: v for k, v in data.items() if k != "change"} == current
            assert events.last_id == await h.store.read(last_change_id)


async def test_deployment_filters_by_id_or_name(tmp_path: Path) -> None:
    async with hub(tmp_path) as h:
        await h.deploy("orders")
        billing = await h.deploy("billing")
        for key in ("billing", billing["id"]):
            async with stream(h, f"/events?deployment={key}") as events:
                await h.send("orders")
                got = await h.send("billing")
                seen: list[dict[str, Any]] = []
                while not seen or seen[-1]["id"] != got["dispatch_id"]:
                    seen.append(msgspec.json.decode((await events.next()).data[0]))
                assert {d["deployment_id"] for d in seen} == {billing["id"]}
        r = await h.http.get("/events?deployment=nobody")
        assert_error(r, 404, "unknown_deployment")


async def test_the_stream_is_the_admins(tmp_path: Path) -> None:
    async with hub(tmp_path) as h:
        async with httpx.AsyncClient(base_url=h.url) as anonymous:
            assert_error(await anonymous.get("/events"), 401, "unauthorized")
        assert_error(await h.http.get("/events?since=-1"), 422, "invalid_request")
        r = await h.http.get("/events", headers={"Last-Event-ID": "x"})
        assert_error(r, 422, "invalid_request")


async def test_a_client_resumes_after_its_last_event_id(tmp_path: Path) -> None:
    async with hub(tmp_path) as h:
        await h.deploy("orders")
        async with stream(h) as events:
            first = await h.send("orders", "one")
            await events.take(2)
            resume = events.last_id
        assert resume is not None
        missed = [await h.send("orders", f"m{i}") for i in range(3)]
        # ?since= in the URL is what a reconnecting EventSource keeps; the header wins.
        async with stream(h, "/events?since=0", **{"Last-Event-ID": str(resume)}) as events:
            assert await events.take(3) == [
                ("dispatch", m["dispatch_id"], "reserved") for m in missed
            ]
        async with stream(h, "/events?since=0") as events:  # all the hub holds
            assert (await events.take(3))[1:] == [
                ("run", first["run_id"], "running"),
                ("dispatch", first["dispatch_id"], "reserved"),
            ]
        # Trimmed past the client's id: it is told first, then gets what is held.
        assert await trim_changes(h.store, 2) > 0
        async with stream(h, **{"Last-Event-ID": str(resume)}) as events:
            reset = await events.next()
            assert reset.kind == "reset"
            assert msgspec.json.decode(reset.data[0])["since"] == resume
            assert await events.take(2) == [
                ("dispatch", m["dispatch_id"], "reserved") for m in missed[1:]
            ]


async def test_a_quiet_stream_is_kept_alive(tmp_path: Path) -> None:
    limits = EventLimits(poll_interval=0.02, keep_alive=0.05)
    async with hub(tmp_path, limits) as h, h.http.stream("GET", "/events") as response:
        lines = response.aiter_lines()
        with anyio.fail_after(10):
            while await anext(lines) != ": ping":
                pass


async def test_a_slow_consumer_is_cut_off_and_nobody_else_notices(tmp_path: Path) -> None:
    limits = EventLimits(poll_interval=0.02, batch=20, buffer=40)
    async with hub(tmp_path, limits) as h:
        await h.deploy("orders")
        host, port = h.url.removeprefix("http://").rsplit(":", 1)
        # A client that asks and never reads: a small window fills soon.
        slow = await anyio.connect_tcp(host, int(port))
        raw = slow.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        async with slow:
            await slow.send(
                f"GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
            )
            async with stream(h) as events, anyio.create_task_group() as tg:
                await wait_for(lambda: h.streams(2), what="two streams")
                seen: set[str] = set()

                async def read() -> None:  # this client reads all the while, and keeps up
                    while True:
                        seen.add((await events.take(1))[0][1])

                tg.start_soon(read)
                # Big events (a long subject), until the socket's buffers are full
                # (a few MB on loopback) and then the stream's own.
                mails = [{"to": "orders@mailrun.local", "subject": "s" * 4000}] * 250
                for _ in range(40):
                    r = await h.http.post("/mail/batch", json={"mails": mails})
                    assert r.status_code == 200
                    if await h.metric("mailrun_event_streams_cut_off_total"):
                        break
                await wait_for(
                    lambda: h.metric("mailrun_event_streams_cut_off_total"), what="a cut-off"
                )
                assert await h.metric("mailrun_event_streams_cut_off_total") == 1
                assert await h.streams(1)
                # The hub goes on: it answers, accepts, and the reader gets the news.
                assert (await h.http.get("/healthz")).status_code == 200
                got = await h.send("orders", "after")
                await wait_for(lambda: got["dispatch_id"] in seen, what="the reader's news")
                tg.cancel_scope.cancel()
            # The slow client's connection is gone (aborted): reading it ends.
            with (
                anyio.fail_after(10),
                pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)),
            ):
                while True:
                    await slow.receive()


async def test_streams_past_the_limit_get_503(tmp_path: Path) -> None:
    async with hub(tmp_path, EventLimits(poll_interval=0.02, max_streams=2)) as h:
        async with stream(h), stream(h):
            assert_error(await h.http.get("/events"), 503, "too_many_streams")
        await wait_for(lambda: h.streams(0), what="streams closed")
        async with stream(h):
            pass


async def test_stopping_the_hub_ends_open_streams_at_once(tmp_path: Path) -> None:
    config = HubSettings(state_dir=tmp_path, http_port=0, admin_token=TOKEN, events=FAST)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            handle = await tg.start(lambda task_status: serve_hub(
                config, transport=MemoryBus().connect("hub"), task_status=task_status
            ))  # fmt: skip
            async with (
                httpx.AsyncClient(base_url=handle.http_url, headers=BEARER) as http,
                http.stream("GET", "/events") as response,
            ):
                lines = response.aiter_lines()
                assert await anext(lines) == f"id: {await handle.store.read(last_change_id)}"
                started = time.monotonic()
                tg.cancel_scope.cancel()
                with pytest.raises(StopAsyncIteration):
                    while True:
                        await anext(lines)
                # Ended by the hub, not by the server's 2 s grace for requests in flight.
                assert time.monotonic() - started < 1.5
