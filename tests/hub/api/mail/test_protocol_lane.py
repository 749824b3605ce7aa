"""``POST /mail`` and ``/mail/batch`` answered by the HTTP protocol itself
(``MailAnswers`` through ``HttpServer(fast_path=...)``), on a real socket: what
the lane takes never reaches the ASGI app, is stored, and is answered as the
app answers it; what it does not take (refusals included) goes the long way;
answers on one connection keep their order; a late body is 408."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from hub import bind_socket
from hub.api import HttpLimits, HttpServer, mail_answers
from tests.support.store import rows

from ..harness import BEARER, TOKEN, Api, api

# slow: every test talks to the hub's HTTP server over real sockets, most wait out a deadline
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TO = "flow@mailrun.local"
_ID = re.compile(r"\b(run|dsp|dep)_[0-9a-f]{26}\b")


class Counting:
    """The ASGI app, counting the requests that reach it, by path."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


@asynccontextmanager
async def serving(
    tmp_path: Path, *, lane: bool = True, body_timeout: float = 60.0
) -> AsyncIterator[tuple[Api, Counting, str]]:
    """The hub's app over a real socket, its mail answered by the protocol
    (``lane``) or by the app; the hub, the app as seen, and the base URL."""
    async with api(tmp_path, body_timeout=body_timeout) as hub:
        await hub.deploy("flow")
        app = Counting(hub.app)
        sock = bind_socket("127.0.0.1", 0)
        host, port = sock.getsockname()[:2]
        lanes = mail_answers(hub.app) if lane else None
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(HttpServer(app, sock, HttpLimits(), fast_path=lanes).run)
                yield hub, app, f"http://{host}:{port}"
                tg.cancel_scope.cancel()
        finally:
            sock.close()


async def test_mail_the_lane_takes_never_reaches_the_app_and_is_stored(tmp_path: Path) -> None:
    async with (
        serving(tmp_path) as (hub, app, url),
        httpx.AsyncClient(base_url=url, headers=BEARER) as client,
    ):
        # One keep-alive connection carries them all.
        answers = [
            await client.post("/mail", json={"to": TO, "subject": f"m{n}"}) for n in range(20)
        ]
        batch = await client.post(
            "/mail/batch", json={"mails": [{"to": TO, "subject": f"b{n}"} for n in range(3)]}
        )
        subjects = [
            row[0]
            for row in await rows(
                hub.store, "SELECT subject FROM workflow_run_dispatch ORDER BY seq"
            )
        ]
    assert [a.status_code for a in answers] == [202] * 20
    assert [a.json()["seq"] for a in answers] == list(range(1, 21))
    assert batch.status_code == 200
    assert [r["seq"] for r in batch.json()["receipts"]] == [21, 22, 23]
    assert subjects == [f"m{n}" for n in range(20)] + ["b0", "b1", "b2"]
    assert app.paths == []  # (the deployment was made through the ASGI transport)


def _mail_requests() -> list[tuple[str, str, dict[str, str], bytes]]:
    """Requests to the mail paths, each with what it exercises: (name, path,
    headers, body)."""
    json_headers = {**BEARER, "Content-Type": "application/json"}

    def body(value: Any) -> bytes:
        return json.dumps(value).encode()

    return [
        ("accepted", "/mail", json_headers, body({"to": TO, "message_id": "m-1"})),
        ("a retry", "/mail", json_headers, body({"to": TO, "message_id": "m-1"})),
        ("a reused id", "/mail", json_headers, body({"to": TO, "message_id": "m-1", "body": "x"})),
        ("nobody there", "/mail", json_headers, body({"to": "nobody@mailrun.local"})),
        ("malformed", "/mail", json_headers, b'{"to": '),
        ("no recipient", "/mail", json_headers, body({"subject": "hi"})),
        ("a header break", "/mail", json_headers, body({"to": TO, "subject": "a\r\nBcc: x"})),
        ("a batch", "/mail/batch", json_headers, body({"mails": [{"to": TO}, {"subject": 1}]})),
        ("an empty batch", "/mail/batch", json_headers, body({"mails": []})),
        ("a wrong token", "/mail", {**json_headers, "Authorization": "Bearer nope"}, b"{}"),
        ("no token", "/mail", {"Content-Type": "application/json"}, body({"to": TO})),
        ("not json", "/mail", {**BEARER, "Content-Type": "text/plain"}, body({"to": TO})),
        ("json, with a charset", "/mail",
         {**BEARER, "Content-Type": "application/json; charset=utf-8"}, body({"to": TO})),
    ]  # fmt: skip


async def _answers(tmp_path: Path, *, lane: bool) -> tuple[list[tuple[int, Any]], list[str]]:
    async with (
        serving(tmp_path, lane=lane) as (_, app, url),
        httpx.AsyncClient(base_url=url) as client,
    ):
        answers = []
        for _, path, headers, content in _mail_requests():
            r = await client.post(path, headers=headers, content=content)
            assert r.headers["content-type"] == "application/json"
            answers.append((r.status_code, json.loads(_ID.sub(r"\1_id", r.text))))
    return answers, app.paths


async def test_the_lane_answers_as_the_app_does_and_leaves_it_the_refusals(
    tmp_path: Path,
) -> None:
    by_lane, reached = await _answers(tmp_path / "lane", lane=True)
    by_app, _ = await _answers(tmp_path / "app", lane=False)
    names = [name for name, *_ in _mail_requests()]
    assert dict(zip(names, by_lane, strict=True)) == dict(zip(names, by_app, strict=True))
    statuses = dict(zip(names, [status for status, _ in by_lane], strict=True))
    assert statuses["accepted"] == statuses["a retry"] == 202
    assert statuses["a wrong token"] == statuses["no token"] == 401
    assert statuses["not json"] == 415
    assert statuses["a batch"] == 200 and statuses["an empty batch"] == 422
    # Only the refusals of credentials and content type went the long way.
    assert reached == ["/mail"] * 3


async def _response(stream: anyio.abc.SocketStream, buffer: bytearray) -> tuple[int, bytes, bytes]:
    """The next answer on ``stream``: status, head and body."""
    with anyio.fail_after(10):
        while b"\r\n\r\n" not in buffer:
            buffer += await stream.receive()
        head, _, _ = bytes(buffer).partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE)[1])  # type: ignore[index]
        end = len(head) + 4 + length
        while len(buffer) < end:
            buffer += await stream.receive()
    answer = bytes(buffer[:end])
    del buffer[:end]
    return int(head.split()[1]), head, answer[len(head) + 4 :]


async def connect(url: str) -> anyio.abc.SocketStream:
    return await anyio.connect_tcp("127.0.0.1", int(url.rsplit(":", 1)[1]))


def _post(path: bytes, body: bytes, *extra: bytes) -> bytes:
    headers = b"".join(h + b"\r\n" for h in extra)
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer %s\r\nContent-Length: %d\r\n%s\r\n%s"
        % (path, TOKEN.encode(), len(body), headers, body)
    )


async def test_pipelined_requests_are_answered_in_their_order(tmp_path: Path) -> None:
    mail = b'{"to": "%s", "subject": "s%d"}'
    async with serving(tmp_path) as (hub, app, url):
        stream = await connect(url)
        # A lane request, an app request and two lane requests in one write.
        await stream.send(
            _post(b"/mail", mail % (TO.encode(), 1))
            + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            + _post(b"/mail", mail % (TO.encode(), 2))
            + _post(b"/mail", mail % (TO.encode(), 3))
        )
        buffer = bytearray()
        answers = [await _response(stream, buffer) for _ in range(4)]
        await stream.aclose()
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 3
    assert [status for status, _, _ in answers] == [202, 200, 202, 202]
    assert [json.loads(body).get("seq") for _, _, body in answers] == [1, None, 2, 3]
    # The first went by the lane; those behind an unanswered request waited in
    # the connection's queue, and the app answered them.
    assert app.paths[0] == "/healthz" and app.paths.count("/mail") <= 2


async def test_a_lane_answer_closes_the_connection_when_asked(tmp_path: Path) -> None:
    async with serving(tmp_path) as (hub, _, url):
        stream = await connect(url)
        await stream.send(_post(b"/mail", b'{"to": "%s"}' % TO.encode(), b"Connection: close"))
        status, head, _ = await _response(stream, bytearray())
        with anyio.fail_after(10), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await stream.receive()  # closed by the server
        await stream.aclose()
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 1
    assert status == 202 and b"connection: close" in head.lower()


async def test_a_lane_body_that_trickles_in_time_is_accepted(tmp_path: Path) -> None:
    async with serving(tmp_path, body_timeout=30) as (hub, app, url):
        stream = await connect(url)
        request = _post(b"/mail", b'{"to": "%s", "subject": "slow"}' % TO.encode())
        for at in range(0, len(request), 7):
            await stream.send(request[at : at + 7])
        status, _, body = await _response(stream, bytearray())
        await stream.aclose()
        stored = await hub.count(
            "SELECT COUNT(*) FROM workflow_run_dispatch WHERE subject = 'slow'"
        )
    assert status == 202 and json.loads(body)["seq"] == 1 and stored == 1
    assert "/mail" not in app.paths


async def test_a_lane_body_that_comes_late_is_408_and_nothing_is_stored(tmp_path: Path) -> None:
    async with serving(tmp_path, body_timeout=0.3) as (hub, app, url):
        stream = await connect(url)
        request = _post(b"/mail", b'{"to": "%s", "subject": "late"}' % TO.encode())
        await stream.send(request[:-10])
        status, head, body = await _response(stream, bytearray())
        with anyio.fail_after(10), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await stream.receive()  # closed by the server: the rest is not a request
        await stream.aclose()
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 0
    assert status == 408 and json.loads(body)["reason"] == "request_timeout"
    assert b"connection: close" in head.lower() and "/mail" not in app.paths
