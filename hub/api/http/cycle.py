"""One request through the ASGI app: its scope, ``receive`` and ``send``.

``send`` writes the answer: its head held until the body's first part
follows (head and body leave as one write, one segment and one wake of the
client for every answer of known length; a stream's head leaves alone when
the loop's turn ends), ``content-length`` kept or ``transfer-encoding:
chunked`` used, nothing of the body for HEAD, ``connection: close`` when
the connection ends after it. It waits while the client's socket does not
take more (``Connection.drain``), so an event stream to a client that does
not read holds its buffer, not the hub's memory.

``receive`` hands the body as it arrives, reading on only when asked: a
body the app does not consume stops the connection being read (past
``HIGH_WATER`` bytes). Once the answer is complete, or the client gone, it
says ``http.disconnect``: an endless stream sees its client leave.
"""

from __future__ import annotations

import asyncio
import logging
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

import httptools

from .channel import Channel
from .wire import date, refusal, status_line

log = logging.getLogger("mailrun.hub.http")

HIGH_WATER = 64 * 1024
"""Bytes of request body held for the app before the connection stops being read."""

_DISCONNECT = {"type": "http.disconnect"}
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_BAD_NAME = re.compile(rb'[\x00-\x20\x7f()<>@,;:\\"/\[\]?={}]')
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")

App = Callable[[dict[str, Any], Any, Any], Any]


def http_scope(
    target: bytes, method: str, version: str, headers: list[tuple[bytes, bytes]]
) -> dict[str, Any]:
    """The ASGI scope of a request (its target as the request line has it);
    ValueError for a target that is no URL path."""
    try:
        url = httptools.parse_url(target)
        raw_path: bytes = url.path
        path = raw_path.decode("ascii")
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
        raise ValueError("the request target is not a path") from None
    if "%" in path:
        path = urllib.parse.unquote(path)
    return {
        "type": "http",
        "asgi": _ASGI,
        "http_version": version,
        "scheme": "http",
        "method": method,
        "root_path": "",
        "path": path,
        "raw_path": raw_path,
        "query_string": url.query or b"",
        "headers": headers,
    }


class AsgiCycle:
    """A request handed to the app, and its answer."""

    def __init__(
        self, conn: Channel, scope: dict[str, Any], *, keep_alive: bool, expect_continue: bool
    ) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.head_only = scope["method"] == "HEAD"
        self.body = bytearray()
        self.more_body = True
        self.disconnected = False
        self.response_complete = False
        self._continue = expect_continue
        self._arrived = asyncio.Event()
        self._body_handed = False
        self._started = False
        self._held: bytes | None = None  # the head, until the body's first part
        self._chunked = False
        self._remaining = 0  # bytes of body the content-length still promises

    def body_arrived(self) -> bool:
        """Whether the whole request body is here (reading it cannot wait)."""
        return not self.more_body

    def feed(self, chunk: bytes) -> None:
        if self.response_complete:
            return  # answered without it: what is left of the body goes
        self.body += chunk
        if len(self.body) > HIGH_WATER:
            self.conn.pause_reading()
        self._arrived.set()

    def ended(self) -> None:
        """The request's body is complete."""
        self.more_body = False
        self._arrived.set()

    def lost(self) -> None:
        """The connection is gone."""
        if not self.response_complete:
            self.disconnected = True
        self._arrived.set()

    async def run(self, app: App) -> None:
        """The app's answer to this request; a failure answers 500 (or, once
        the answer has begun, closes the connection), never raises."""
        try:
            await app(self.scope, self.receive, self.send)
        except Exception:
            if self.disconnected:
                return  # the client left: its answer has nowhere to go
            log.exception("%s %s failed", self.scope["method"], self.scope["path"])
            self._failed("the application raised")
        else:
            if not self.response_complete and not self.disconnected:
                self._failed("the application returned without a complete answer")
        finally:
            if not self.response_complete:  # failed, or cancelled at shutdown
                self.conn.close()

    def _failed(self, why: str) -> None:
        if self._started:
            self.conn.close()
        else:
            self.response_complete = True
            self.conn.write(refusal(500, "Internal Server Error", why=why))
            self.conn.close()

    async def receive(self) -> dict[str, Any]:
        if self._continue:
            self._continue = False
            if not self.conn.closing():
                self.conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        while True:
            if self.disconnected or self.response_complete:
                return _DISCONNECT
            if self.body or (not self.more_body and not self._body_handed):
                message = {"type": "http.request", "body": bytes(self.body), "more_body": True}
                self.body.clear()
                if not self.more_body:
                    message["more_body"] = False
                    self._body_handed = True
                return message
            self.conn.resume_reading()
            self._arrived.clear()
            await self._arrived.wait()

    async def send(self, message: dict[str, Any]) -> None:
        if self.conn.write_paused and not self.disconnected:
            await self.conn.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self._started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', not {kind!r}")
            self._start(message["status"], message.get("headers", ()))
        elif self.response_complete or kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        else:
            self._body(message.get("body", b""), message.get("more_body", False))

    def _start(self, status: int, headers: Any) -> None:
        self._started = True
        self._continue = False
        head = [status_line(status), date.header()]
        length: int | None = None
        for name, value in headers:
            if _BAD_NAME.search(name) or _BAD_VALUE.search(value):
                raise RuntimeError("a response header is not valid HTTP")
            lowered = name.lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                continue  # written below, once
            elif lowered == b"transfer-encoding":
                continue  # the server frames the body
            head += [name, b": ", value, b"\r\n"]
        if length is not None:
            self._remaining = length
        elif not self.head_only and status not in (204, 304) and status >= 200:
            self._chunked = True
            head.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self._held = b"".join(head)
        self.conn.loop.call_soon(self._flush)

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if not self.conn.closing():
                self.conn.write(held)

    def _body(self, body: bytes, more_body: bool) -> None:
        if self.head_only:
            data = b""
        elif self._chunked:
            data = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += b"0\r\n\r\n"
        else:
            if len(body) > self._remaining:
                raise RuntimeError("the response body is longer than its content-length")
            self._remaining -= len(body)
            if not more_body and self._remaining:
                raise RuntimeError("the response body is shorter than its content-length")
            data = body
        if self._held is not None:
            data, self._held = self._held + data, None
        if data:
            self.conn.write(data)
        if not more_body:
            self.response_complete = True
            self._arrived.set()
            self.conn.answered(self, keep_alive=self.keep_alive)
