"""One gate for every route, over a real socket against the hub's own HTTP
server (the mail fast path included): the app's whole routing table, read
from the app object, walked with no token, a wrong token and a producer's
credential, each refused 401 (``GET /healthz`` without credentials says
only its status), and with the admin token, which passes everywhere."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from hub import bind_socket
from hub.api import HttpLimits, HttpServer, mail_answers
from hub.api.auth import ADMIN, OPEN, Gate, Login, Refusal

from ..harness import BEARER, TOKEN, Api, api

pytestmark = pytest.mark.anyio

_PARAMETER = re.compile(r"\{(\w+)(?::(\w+))?\}")


def routing_table(app: Starlette) -> list[tuple[str, str]]:
    """(method, path) for every route of ``app`` and each of its methods,
    path parameters filled in (a number for an int, an unknown id otherwise)."""
    calls = []
    for route in app.routes:
        assert isinstance(route, Route), route  # a Mount would need walking into
        path = _PARAMETER.sub(lambda m: "7" if m[2] == "int" else "x_1", route.path)
        calls += [(method, path) for method in sorted(route.methods or ())]
    return calls


@asynccontextmanager
async def served(tmp_path: Path) -> AsyncIterator[tuple[Api, str]]:
    async with api(tmp_path) as hub:
        sock = bind_socket("127.0.0.1", 0)
        host, port = sock.getsockname()[:2]
        server = HttpServer(hub.app, sock, HttpLimits(), fast_path=mail_answers(hub.app))
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(server.run)
                yield hub, f"http://{host}:{port}"
                tg.cancel_scope.cancel()
        finally:
            sock.close()


async def status_of(client: httpx.AsyncClient, method: str, path: str) -> httpx.Response:
    """The answer's head (and body, unless it streams: /events)."""
    body = {"json": {}} if method in ("POST", "PUT", "PATCH") else {}
    with anyio.fail_after(10):
        async with client.stream(method, path, **body) as r:  # type: ignore[arg-type]
            if not r.headers.get("content-type", "").startswith("text/event-stream"):
                await r.aread()
            return r


async def test_every_route_refuses_every_credential_but_the_admins(tmp_path: Path) -> None:
    async with served(tmp_path) as (hub, url):
        created = await hub.client.post("/producers", json={"name": "orders-feed"})
        assert created.status_code == 201, created.text
        seed = created.json()["seed"]
        calls = routing_table(hub.app)
        assert {("POST", "/mail"), ("POST", "/mail/batch"), ("GET", "/healthz")} <= set(calls)
        assert ("POST", "/workflows/deployments") in calls and len(calls) >= 30
        credentials = {
            "none": {},
            "a wrong token": {"Authorization": f"Bearer {TOKEN}x"},
            "a producer's seed": {"Authorization": f"Bearer {seed}"},
        }
        refused: list[str] = []
        async with httpx.AsyncClient(base_url=url) as client:
            for method, path in calls:
                for name, headers in credentials.items():
                    client.headers.clear()
                    client.headers.update(headers)
                    r = await status_of(client, method, path)
                    if path == "/healthz" and name == "none":
                        assert r.status_code == 200, (method, path)
                        if method == "GET":
                            assert r.json() == {"status": "ok"}
                        continue
                    assert r.status_code == 401, (method, path, name, r.status_code)
                    assert r.headers["www-authenticate"].startswith("Bearer")
                    if method != "HEAD":
                        assert r.json()["reason"] == "unauthorized"
                    refused.append(f"{method} {path}")
                client.headers.clear()
                client.headers.update(BEARER)
                r = await status_of(client, method, path)
                assert r.status_code not in (401, 403), (method, path, r.status_code)
        assert len(refused) == 3 * len(calls) - 2  # all but the two open asks of /healthz
        # Nothing was changed by the refused: the producer made above, nothing else.
        assert await hub.count("SELECT COUNT(*) FROM deployment") == 0
        assert await hub.count("SELECT COUNT(*) FROM producer") == 1


def test_the_one_decision() -> None:
    gate = Gate(TOKEN)
    bearer = [(b"authorization", b"Bearer " + TOKEN.encode())]
    cookie = [(b"cookie", b"mailrun_session=" + TOKEN.encode()), (b"host", b"hub:1")]
    json_body = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    assert gate.decide("POST", "/mail", b"", bearer + json_body) is ADMIN
    assert gate.decide("GET", "/healthz", b"", []) is OPEN
    assert gate.decide("GET", "/runs", b"", cookie) is ADMIN
    assert gate.decide("POST", "/runs", b"", [*cookie, (b"origin", b"http://hub:1")]) is ADMIN
    for method, path, headers, status in [
        ("GET", "/runs", [], 401),
        ("GET", "/healthz", [(b"authorization", b"Bearer nope")], 401),
        ("POST", "/mail", cookie + json_body, 401),  # a cookie changes nothing without Origin
        ("POST", "/mail", [*bearer, (b"content-length", b"2")], 415),
        ("POST", "/mail", [*bearer, (b"transfer-encoding", b"chunked")], 415),
        ("WEBSOCKET", "/healthz", [], 401),
    ]:
        decision = gate.decide(method, path, b"", headers)
        assert isinstance(decision, Refusal) and decision.error.http_status == status, (
            method,
            path,
            headers,
        )
    assert gate.decide("GET", "/", b"token=" + TOKEN.encode(), []) == Login(TOKEN)
    login = gate.decide("GET", "/", b"token=nope", [])
    assert isinstance(login, Refusal) and login.headers["Cache-Control"] == "no-store"
