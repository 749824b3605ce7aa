"""The admin token guards every route but /healthz: bearer, the console's
cookie (with a matching Origin on anything that may change state), and JSON
only for request bodies."""

from __future__ import annotations

import json
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from hub.api.auth import AdminAuth, Gate

from ..harness import BEARER, ORIGIN, SOURCE, TOKEN, Api, api, assert_error

pytestmark = pytest.mark.anyio

DEPLOY = {"name": "evil", "source": "import os\nasync def main(ctx, item): pass\n"}


def every_route(app: object) -> list[tuple[str, str]]:
    """(method, path) of every route the app has, path parameters filled in."""
    calls = []
    for route in app.routes:  # type: ignore[attr-defined]
        assert isinstance(route, Route)
        path = route.path.replace("{key}", "evil").replace("{id}", "x_1")
        calls += [(method, path) for method in sorted(route.methods or ()) if method != "HEAD"]
    return calls


async def nothing_changed(hub: Api) -> None:
    assert await hub.count("SELECT COUNT(*) FROM deployment") == 0
    assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 0


async def test_without_the_token_every_route_but_healthz_is_401(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        calls = every_route(hub.app)
        assert ("POST", "/workflows/deployments") in calls and len(calls) >= 11
        for method, path in calls:
            r = await hub.anonymous.request(method, path, json={} if method == "POST" else None)
            if path == "/healthz":
                assert r.status_code == 200 and r.json() == {"status": "ok"}
                continue
            assert_error(r, 401, "unauthorized")
            assert r.headers["www-authenticate"].startswith("Bearer")
        # The attack of a web page: a simple cross-site POST, no preflight.
        for headers in (
            {"content-type": "text/plain"},
            {"content-type": "text/plain", "origin": "http://evil.example"},
            {"content-type": "application/json", "origin": "http://evil.example"},
            {"content-type": "application/x-www-form-urlencoded", "origin": "null"},
        ):
            r = await hub.anonymous.post(
                "/workflows/deployments", content=json.dumps(DEPLOY), headers=headers
            )
            assert_error(r, 401, "unauthorized")
        await nothing_changed(hub)


async def test_a_wrong_token_is_401_everywhere_healthz_included(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        for authorization in (
            f"Bearer {TOKEN}x",
            f"Bearer {TOKEN[:-1]}",
            "Bearer ",
            f"Basic {TOKEN}",
            f"Bearer {TOKEN}\u00e9",
            TOKEN,
        ):
            headers = {"authorization": authorization.encode("utf-8")}
            for path in ("/healthz", "/workflows/deployments", "/metrics"):
                r = await hub.anonymous.get(path, headers=headers)
                assert_error(r, 401, "unauthorized")
            r = await hub.anonymous.post("/workflows/deployments", json=DEPLOY, headers=headers)
            assert_error(r, 401, "unauthorized")
        await nothing_changed(hub)


async def test_with_the_token_everything_answers_and_healthz_says_all(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        health = (await hub.client.get("/healthz")).json()
        assert health["boot_id"] == "boot_x" and health["nats_url"] and health["status"] == "ok"
        dep = await hub.deploy("flow")
        # Scheme and spacing are not the token: RFC 6750's "Bearer" is case-insensitive.
        r = await hub.anonymous.get(
            f"/workflows/deployments/{dep['id']}", headers={"authorization": f"bearer  {TOKEN}"}
        )
        assert r.status_code == 200 and r.json()["id"] == dep["id"]
        assert (await hub.send("flow@mailrun.local")).status_code == 202


async def test_a_body_that_is_not_json_is_415_before_any_handler(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        body = b'{"to": "flow@mailrun.local", "subject": "hi"}'
        for content_type in (None, "text/plain", "application/x-www-form-urlencoded",
                             "multipart/form-data; boundary=x", "application/jsonx"):  # fmt: skip
            headers = {"content-type": content_type} if content_type else {}
            request = hub.client.build_request("POST", "/mail", content=body, headers=headers)
            if content_type is None:
                request.headers.pop("content-type", None)
            assert_error(await hub.client.send(request), 415, "unsupported_media_type")
        ok = await hub.client.post(
            "/mail", content=body, headers={"content-type": "Application/JSON; charset=utf-8"}
        )
        assert ok.status_code == 202, ok.text
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 1


def session_cookie(r: httpx.Response) -> SimpleCookie:
    cookie = SimpleCookie()
    cookie.load(r.headers["set-cookie"])
    return cookie


async def test_the_console_url_logs_in_with_a_strict_httponly_cookie(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        r = await hub.anonymous.get("/", params={"token": TOKEN + "x"})
        assert_error(r, 401, "unauthorized")
        assert "set-cookie" not in r.headers

        r = await hub.anonymous.get("/", params={"token": TOKEN})
        assert r.status_code == 303 and r.headers["location"] == "/"
        assert r.headers["referrer-policy"] == "no-referrer"
        morsel = session_cookie(r)["mailrun_session"]
        assert morsel.value == TOKEN
        assert morsel["httponly"] and morsel["samesite"] == "strict" and morsel["path"] == "/"
        hub.anonymous.cookies.clear()  # the client kept it; from here it is sent by hand

        cookies = {"cookie": f"theme=dark; mailrun_session={TOKEN}"}
        page = await hub.anonymous.get("/", headers=cookies)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        listed = await hub.anonymous.get("/workflows/deployments", headers=cookies)
        assert listed.status_code == 200 and listed.json() == {"deployments": []}
        assert_error(await hub.anonymous.get("/"), 401, "unauthorized")
        assert_error(
            await hub.anonymous.get("/", headers={"cookie": "mailrun_session=" + "x" * 40}),
            401,
            "unauthorized",
        )


async def test_the_cookie_changes_nothing_without_the_hubs_own_origin(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        cookies = {"cookie": f"mailrun_session={TOKEN}"}
        # SameSite=Strict still sends the cookie from another port of the same
        # host: only the Origin tells that page from the console.
        for origin in (None, "null", "http://evil.example", "http://hub:8080", "http://hub.evil"):
            headers = {**cookies, "origin": origin} if origin else cookies
            r = await hub.anonymous.post("/workflows/deployments", json=DEPLOY, headers=headers)
            assert_error(r, 401, "unauthorized")
            r = await hub.anonymous.delete("/workflows/deployments/evil", headers=headers)
            assert_error(r, 401, "unauthorized")
        await nothing_changed(hub)

        for origin in (ORIGIN, "https://HUB"):  # the scheme is a TLS proxy's business
            r = await hub.anonymous.post(
                "/workflows/deployments",
                json={"name": f"ok{len(origin)}", "source": SOURCE},
                headers={**cookies, "origin": origin},
            )
            assert r.status_code == 201, r.text
        assert await hub.count("SELECT COUNT(*) FROM deployment") == 2


async def test_the_bearer_token_needs_no_origin(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        r = await hub.anonymous.post(
            "/workflows/deployments",
            json={"name": "cli", "source": SOURCE},
            headers={**BEARER, "origin": "http://elsewhere.example"},
        )
        assert r.status_code == 201, r.text


async def test_a_websocket_is_guarded_like_a_request_that_changes_state() -> None:
    async def accept(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "websocket.accept"})

    async def first_answer(headers: dict[str, str]) -> Message:
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "websocket.connect"}

        async def send(message: Message) -> None:
            sent.append(message)

        raw = [(k.lower().encode(), v.encode()) for k, v in {"host": "hub", **headers}.items()]
        scope = {"type": "websocket", "path": "/ws", "query_string": b"", "headers": raw}
        await AdminAuth(accept, gate=Gate(TOKEN))(scope, receive, send)
        return sent[0]

    cookie = {"cookie": f"mailrun_session={TOKEN}"}
    for headers in ({}, cookie, {**cookie, "origin": "http://evil.example"}, {"x": "y"}):
        assert await first_answer(headers) == {"type": "websocket.close", "code": 1008}
    for headers in (BEARER, {**cookie, "origin": ORIGIN}):
        assert await first_answer(headers) == {"type": "websocket.accept"}
