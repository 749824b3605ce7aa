"""What one client may hold of the HTTP server (HttpLimits), on a real socket:
a head must arrive within its deadline however it trickles, connections past
the limit get 503 at once, a huge head is refused, a slow body times out."""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import anyio.lowlevel
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from hub import bind_socket
from hub.api import HttpLimits, HttpServer
from hub.api.http import BODY_ARRIVED_EXTENSION
from hub.api.http.cycle import AsgiCycle
from tests.support import wait_for

from ..harness import TOKEN, api, assert_error

# slow: every test runs the HTTP server over real sockets, most wait out a deadline
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


async def size(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


@asynccontextmanager
async def serving(limits: HttpLimits) -> AsyncIterator[tuple[str, int]]:
    sock = bind_socket("127.0.0.1", 0)
    address = sock.getsockname()[:2]
    server = HttpServer(
        Starlette(routes=[Route("/", hello), Route("/size", size, methods=["POST"])]), sock, limits
    )
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(server.run)
            yield address
            tg.cancel_scope.cancel()
    finally:
        sock.close()


async def closed_by_server(stream: anyio.abc.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    with anyio.fail_after(10):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return data


async def get(address: tuple[str, int]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"http://{address[0]}:{address[1]}") as client:
        return await client.get("/", timeout=5)


async def test_a_head_must_arrive_within_its_deadline_however_it_trickles() -> None:
    async with serving(HttpLimits(head_timeout=0.5, keep_alive=60)) as address:
        silent = await anyio.connect_tcp(*address)
        trickler = await anyio.connect_tcp(*address)
        reused = await anyio.connect_tcp(*address)
        started = time.monotonic()

        async def trickle(stream: anyio.abc.SocketStream) -> None:
            await stream.send(b"GET / HTTP/1.1\r\nHost: x\r\n")
            with pytest.raises((anyio.BrokenResourceError, OSError)):
                for _ in range(100):  # one byte at a time, for 10 s if let
                    await stream.send(b"X")
                    await anyio.sleep(0.1)

        async def answered_then_trickled(stream: anyio.abc.SocketStream) -> None:
            await stream.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            first = await stream.receive()
            assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"hello")
            await trickle(stream)

        async with anyio.create_task_group() as tg:
            tg.start_soon(trickle, trickler)
            tg.start_soon(answered_then_trickled, reused)
            assert (await get(address)).text == "hello"  # served meanwhile
            assert await closed_by_server(silent) == b""
            assert await closed_by_server(trickler) == b""
            assert await closed_by_server(reused) == b""
        assert time.monotonic() - started < 5  # not the 10 s the trickling would take
        for stream in (silent, trickler, reused):
            await stream.aclose()


async def test_past_the_connection_limit_requests_get_503_at_once() -> None:
    async with serving(HttpLimits(head_timeout=60, max_connections=4)) as address:
        idle = [await anyio.connect_tcp(*address) for _ in range(4)]
        with anyio.fail_after(5):  # at once, not after the idle ones' 60 s
            r = await get(address)
        assert r.status_code == 503
        for stream in idle:
            await stream.aclose()

        async def served() -> bool:
            return (await get(address)).status_code == 200

        await wait_for(served, timeout=5, what="a request served once the idle ones left")


@pytest.mark.parametrize(
    "chunks",
    [
        [b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8192],  # one line, unfinished
        [b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ", b"a" * 3000, b"a" * 3000],  # in pieces
        [b"GET / HTTP/1.1\r\n" + b"X-Many: aaaaaaaa\r\n" * 400 + b"\r\n"],  # whole, at once
    ],
    ids=["unfinished", "trickled", "whole"],
)
async def test_a_head_past_its_size_is_refused_431(chunks: list[bytes]) -> None:
    async with serving(HttpLimits(max_head_bytes=4096)) as address:
        stream = await anyio.connect_tcp(*address)
        for chunk in chunks:
            await stream.send(chunk)
        assert (await closed_by_server(stream)).startswith(b"HTTP/1.1 431")
        await stream.aclose()
        assert (await get(address)).text == "hello"


async def test_a_head_within_its_size_and_a_big_body_are_served() -> None:
    async with serving(HttpLimits(max_head_bytes=4096)) as address:
        stream = await anyio.connect_tcp(*address)
        body = b"b" * 100_000  # a body is not head: only the head's size is bounded
        head = b"POST /size HTTP/1.1\r\nHost: x\r\n" + b"X-Some: aaaaaaaa\r\n" * 150
        await stream.send(head + b"Content-Length: %d\r\n\r\n" % len(body))
        for at in range(0, len(body), 7000):
            await stream.send(body[at : at + 7000])
        with anyio.fail_after(5):
            answer = await stream.receive()
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n100000"), answer
        await stream.aclose()


async def test_a_body_that_does_not_arrive_in_time_is_408(tmp_path: Path) -> None:
    async with api(tmp_path, body_timeout=0.3) as hub:

        async def slow() -> AsyncIterator[bytes]:
            yield b'{"to": "flow@mailrun.local",'
            await anyio.sleep(30)
            yield b'"subject": "late"}'

        with anyio.fail_after(5):
            r = await hub.client.post(
                "/mail", content=slow(), headers={"content-type": "application/json"}
            )
        assert_error(r, 408, "request_timeout")
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 0


def test_the_server_raises_its_open_files_limit_to_hold_its_connections() -> None:
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = HttpLimits().max_connections + 256
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))  # a distribution's 1024
    sock = bind_socket("127.0.0.1", 0)
    try:
        HttpServer(Starlette(), sock)
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert soft == (needed if hard == resource.RLIM_INFINITY else min(needed, hard))
    finally:
        sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (before, hard))


async def test_the_server_says_whether_a_body_has_arrived_whole() -> None:
    """A body written with its head has arrived when the app is called; one
    still on its way has not (the mail lane then keeps the body deadline)."""
    seen: list[bool] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["extensions"][BODY_ARRIVED_EXTENSION]())
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sock = bind_socket("127.0.0.1", 0)
    address = sock.getsockname()[:2]
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(HttpServer(app, sock, HttpLimits()).run)
            stream = await anyio.connect_tcp(*address)
            head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n"
            await stream.send(head + b"body")
            with anyio.fail_after(5):
                assert (await stream.receive()).startswith(b"HTTP/1.1 204")
            await stream.send(head + b"bo")
            await wait_for(lambda: len(seen) == 2)
            await stream.send(b"dy")
            with anyio.fail_after(5):
                assert (await stream.receive()).startswith(b"HTTP/1.1 204")
            await stream.aclose()
            tg.cancel_scope.cancel()
    finally:
        sock.close()
    assert seen == [True, False]


async def test_a_mail_whose_body_comes_late_over_a_socket_is_408(tmp_path: Path) -> None:
    async with api(tmp_path, body_timeout=0.3) as hub:
        sock = bind_socket("127.0.0.1", 0)
        address = sock.getsockname()[:2]
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(HttpServer(hub.app, sock, HttpLimits()).run)
                stream = await anyio.connect_tcp(*address)
                body = b'{"to": "flow@mailrun.local", "subject": "late"}'
                await stream.send(
                    b"POST /mail HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:10])
                )
                answer = b""
                with anyio.fail_after(5):
                    while b"}" not in answer:  # the end of the error's JSON body
                        answer += await stream.receive()
                await stream.aclose()
                tg.cancel_scope.cancel()
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"reason":"request_timeout"' in answer
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 0


class _Recorder:
    """The connection side of a cycle, recording each write (a unit test of
    how a cycle writes its answer)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.writes: list[bytes] = []
        self.write_paused = False
        self.answered_with: list[bool] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def closing(self) -> bool:
        return False

    def answered(self, request: object, *, keep_alive: bool) -> None:
        self.answered_with.append(keep_alive)


def _cycle(recorder: _Recorder, method: str = "GET") -> AsgiCycle:
    scope = {"type": "http", "method": method, "path": "/"}
    return AsgiCycle(recorder, scope, keep_alive=True, expect_continue=False)  # type: ignore[arg-type]


async def test_a_head_and_its_body_go_out_as_one_write() -> None:
    recorder = _Recorder()
    cycle = _cycle(recorder)
    start = {"type": "http.response.start", "status": 200}
    await cycle.send({**start, "headers": [(b"content-length", b"4")]})
    await cycle.send({"type": "http.response.body", "body": b"body"})
    (answer,) = recorder.writes
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nbody")
    assert recorder.answered_with == [True]
    # A stream's head goes out alone when the loop's turn ends, chunked.
    stream = _cycle(recorder)
    await stream.send({**start, "headers": []})
    assert len(recorder.writes) == 1
    await anyio.lowlevel.checkpoint()  # the flush was queued before this task's turn
    assert recorder.writes[1].endswith(b"transfer-encoding: chunked\r\n\r\n")
    await stream.send({"type": "http.response.body", "body": b"abc", "more_body": True})
    await stream.send({"type": "http.response.body", "body": b""})
    assert recorder.writes[2:] == [b"3\r\nabc\r\n", b"0\r\n\r\n"]
    # HEAD: the head says the length; no body follows it.
    head = _cycle(recorder, "HEAD")
    await head.send({**start, "headers": [(b"content-length", b"4")]})
    await head.send({"type": "http.response.body", "body": b"body"})
    assert b"content-length: 4\r\n" in recorder.writes[-1]
    assert recorder.writes[-1].endswith(b"\r\n\r\n")


class _HeldLane:
    """A fast path (a fake of the hub's mail answers) whose answers wait for
    ``release``; ``/broken`` fails as a bug would."""

    body_timeout = 5.0

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.cancelled = False

    def takes(self, target: bytes, headers: object) -> str | None:
        return {b"/held": "held", b"/broken": "broken"}.get(target)

    async def answer(self, route: str, body: bytes) -> tuple[int, bytes]:
        if route == "broken":
            raise RuntimeError("a bug in an answer")
        self.started.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        return 200, b'{"body":"%s"}' % body

    def late(self) -> tuple[int, bytes]:
        return 408, b"{}"


@asynccontextmanager
async def lane_serving(lane: _HeldLane) -> AsyncIterator[tuple[HttpServer, tuple[str, int]]]:
    sock = bind_socket("127.0.0.1", 0)
    server = HttpServer(Starlette(routes=[Route("/", hello)]), sock, HttpLimits(), fast_path=lane)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(server.run)
            yield server, sock.getsockname()[:2]
            tg.cancel_scope.cancel()
    finally:
        sock.close()


def refuses(address: tuple[str, int]) -> Callable[[], Awaitable[bool]]:
    async def refused() -> bool:
        try:
            await (await anyio.connect_tcp(*address)).aclose()
        except OSError:
            return True
        return False

    return refused


def _post(target: bytes, body: bytes) -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        target,
        len(body),
        body,
    )


async def held(lane: _HeldLane, address: tuple[str, int]) -> anyio.abc.SocketStream:
    """A connection whose request's answer has begun, and waits for ``lane.release``."""
    stream = await anyio.connect_tcp(*address)
    await stream.send(_post(b"/held", b"x"))
    with anyio.fail_after(5):
        await lane.started.wait()
    return stream


async def test_a_shutdown_waits_for_the_lane_answers_in_flight() -> None:
    lane = _HeldLane()
    async with lane_serving(lane) as (server, address):
        stream = await held(lane, address)
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.shutdown)
            # The server closes its listener and asks each connection to close
            # after its answer in one step: once it refuses, it has asked.
            await wait_for(refuses(address))
            lane.release.set()
            answer = await closed_by_server(stream)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        # Asked to stop, the server closes the connection after its answer.
        assert b"connection: close\r\n" in answer and answer.endswith(b'{"body":"x"}')
        assert not lane.cancelled
        await stream.aclose()


async def test_a_lane_answer_past_the_graceful_shutdown_is_cancelled() -> None:
    lane = _HeldLane()
    async with lane_serving(lane) as (server, address):
        stream = await held(lane, address)
        with anyio.fail_after(10):
            await server.shutdown()  # the graceful shutdown: 2 s
        assert lane.cancelled
        assert await closed_by_server(stream) == b""  # unanswered, and closed
        await stream.aclose()


async def test_a_lane_answer_that_fails_closes_its_connection_and_not_the_server() -> None:
    lane = _HeldLane()
    lane.release.set()
    async with lane_serving(lane) as (_, address):
        broken = await anyio.connect_tcp(*address)
        await broken.send(_post(b"/broken", b"x"))
        assert await closed_by_server(broken) == b""
        await broken.aclose()
        stream = await anyio.connect_tcp(*address)
        await stream.send(_post(b"/held", b"y"))
        with anyio.fail_after(5):
            answer = await stream.receive()
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"body":"y"}'), answer
        assert (await get(address)).text == "hello"
        await stream.aclose()


async def answer_of(stream: anyio.abc.SocketStream, until: bytes) -> bytes:
    data = b""
    with anyio.fail_after(5):
        while until not in data:
            data += await stream.receive()
    return data


async def test_100_continue_head_chunked_bodies_and_connection_close() -> None:
    async with serving(HttpLimits()) as address:
        stream = await anyio.connect_tcp(*address)
        # 100-continue: the interim answer comes when the app reads the body.
        await stream.send(
            b"POST /size HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        )
        assert await answer_of(stream, b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        await stream.send(b"12345")
        assert (await answer_of(stream, b"\r\n\r\n5")).startswith(b"HTTP/1.1 200")
        # A chunked request body, whole to the app.
        await stream.send(
            b"POST /size HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
        )
        assert (await answer_of(stream, b"\r\n\r\n7")).startswith(b"HTTP/1.1 200")
        # HEAD: the head of a GET, its length said, no body.
        await stream.send(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await answer_of(stream, b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: 5\r\n" in head
        assert head.endswith(b"\r\n\r\n")
        # Asked to close, the server closes after its answer.
        await stream.send(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        last = await closed_by_server(stream)
        assert last.startswith(b"HTTP/1.1 200") and b"connection: close\r\n" in last
        assert last.endswith(b"hello")
        await stream.aclose()


@asynccontextmanager
async def serving_app(app: Callable[..., Awaitable[None]]) -> AsyncIterator[tuple[str, int]]:
    sock = bind_socket("127.0.0.1", 0)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(HttpServer(app, sock, HttpLimits()).run)
            yield sock.getsockname()[:2]
            tg.cancel_scope.cancel()
    finally:
        sock.close()


async def test_the_app_sees_its_client_leave() -> None:
    seen: list[str] = []
    left = anyio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        seen.append((await receive())["type"])  # the empty body
        seen.append((await receive())["type"])  # then nothing until the client leaves
        left.set()

    async with serving_app(app) as address:
        stream = await anyio.connect_tcp(*address)
        await stream.send(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await answer_of(stream, b"data: 1")).startswith(b"HTTP/1.1 200")
        await stream.aclose()
        with anyio.fail_after(5):
            await left.wait()
    assert seen == ["http.request", "http.disconnect"]


async def test_a_body_the_app_does_not_read_stops_the_reading() -> None:
    answered = anyio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await answered.wait()  # never reads the body

    async with serving_app(app) as address:
        stream = await anyio.connect_tcp(*address)
        size = 256 * 1024 * 1024
        await stream.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
        sent = 0
        with anyio.move_on_after(2):
            while sent < size:
                await stream.send(b"x" * (1024 * 1024))
                sent += 1024 * 1024
        # The kernel's buffers hold a few megabytes; the server took no more.
        assert sent < 64 * 1024 * 1024, sent
        answered.set()
        await stream.aclose()
