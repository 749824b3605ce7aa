"""The apps `bench/parts/http_servers.py` serves: the same answer to `POST /mail`
(read the body, answer 202 with a receipt-sized JSON object) through a bare
ASGI callable, as the hub's mail lane is, through a Starlette route, and
from a bare asyncio protocol (:func:`floor`)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httptools
import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

RECEIPT = (
    b'{"dispatch_id":"dsp_00000000000000000000000000","run_id":"run_00000000000000000000000000",'
    b'"deployment_id":"dep_00000000000000000000000000","seq":1,"duplicate":false}'
)
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(RECEIPT))]


async def bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 202, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": RECEIPT})


async def _mail(request: Request) -> Response:
    await request.body()
    return Response(RECEIPT, status_code=202, media_type="application/json")


starlette = Starlette(routes=[Route("/mail", _mail, methods=["POST"])])


_ANSWER = (
    b"HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    % len(RECEIPT)
    + RECEIPT
)


class _Floor(asyncio.Protocol):
    """Parses requests with httptools and writes a canned answer to each."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.parser = httptools.HttpRequestParser(self)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.transport.write(_ANSWER)


def floor(port: int) -> None:
    """Serve the canned answer on ``port`` until killed: no ASGI at all."""

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(_Floor, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(serve())


def hub_server(port: int) -> None:
    """The bare app behind the hub's own server (``hub.api.HttpServer``:
    httptools, its own protocol, a response in one write) on uvloop."""
    import anyio

    from hub import bind_socket
    from hub.api import HttpLimits, HttpServer

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(HttpServer(bare, bind_socket("127.0.0.1", port), HttpLimits()).run)

    anyio.run(serve, backend_options={"use_uvloop": True})
