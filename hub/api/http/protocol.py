"""One HTTP/1.1 connection: httptools' parser fed from the socket, its
requests answered in their order, and the limits one client is held to.

Each request whose head is complete becomes an :class:`AsgiCycle` for the
app, or a :class:`FastRequest` when the server's ``FastPath`` takes it (a
POST it answers itself). One request is answered at a time: a request
pipelined behind another waits, and the connection is not read meanwhile,
so the answers leave in the order the requests came.

The limits (``HttpLimits``): a head must be complete within
``head_timeout`` of the connection being made or of the last answer,
whatever trickles in meanwhile; a head larger than ``max_head_bytes`` is
refused 431 as it arrives (httptools would buffer an unfinished header line
without limit); a connection idle for ``keep_alive`` after an answer is
closed; past ``max_connections`` connections, or requests in flight, a
request is refused 503 at once.

Every request is offered ``scope["extensions"][ABORT_EXTENSION]``, which
closes its connection at once, dropping what is queued for it (an event
stream whose client stopped reading is cut off with it), and
``[BODY_ARRIVED_EXTENSION]``, whether its body is all here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

import httptools

from .channel import Link
from .cycle import App, AsgiCycle, http_scope
from .fast import FastPath, FastRequest
from .serving import Serving
from .wire import refusal

log = logging.getLogger("mailrun.hub.http")

ABORT_EXTENSION = "mailrun.abort"
BODY_ARRIVED_EXTENSION = "mailrun.body_arrived"


class _HeadTooLarge(Exception):
    pass


Request = AsgiCycle | FastRequest


class Connection(Link):
    """The protocol of one accepted connection."""

    def __init__(self, serving: Serving) -> None:
        super().__init__()
        self.serving = serving
        self.parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # httptools before 0.6.3
            # Bytes after a request that asked to close are left unread, not an
            # error that would refuse that request before it is answered.
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self._head_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._local: tuple[str, int] | None = None
        self._peer: tuple[str, int] | None = None
        # The request being parsed.
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._continue = False
        self._in_head = False
        self._received = 0  # bytes of an unfinished head, as they arrived
        self._parsed = 0  # bytes of its request line and headers parsed
        self._too_large = False
        self._parsing: Request | None = None  # whose body the parser is reading
        # The request being answered, and those waiting behind it.
        self._answering: Request | None = None
        self._queue: deque[tuple[AsgiCycle, App]] = deque()

    # asyncio's callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._local = _address(transport.get_extra_info("sockname"))
        self._peer = _address(transport.get_extra_info("peername"))
        self.serving.connections.add(self)
        if self.serving.draining:
            transport.close()
            return
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        for request in {self._parsing, self._answering, *(c for c, _ in self._queue)}:
            if request is not None:
                request.lost()
        self._queue.clear()
        super().connection_lost(exc)
        self.serving.gone(self)

    def data_received(self, data: bytes) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # No upgrade is offered: the request was answered as a plain one
            # (its connection closes after it), and nothing after it is read.
            if isinstance(self._parsing, AsgiCycle):
                self._parsing.ended()
            return
        except httptools.HttpParserError:
            if self._too_large:
                self._refuse(431, "Request head too large.")
            else:
                self._refuse(400, "Invalid HTTP request received.")
            return
        if self._in_head and not self.closing():
            # The head is unfinished after this chunk: the chunk is head
            # (a pipelined body's tail before it counts too, erring on the
            # side of refusing).
            self._received += len(data)
            if self._received > self.serving.limits.max_head_bytes:
                self._too_large = True
                self._refuse(431, "Request head too large.")

    def eof_received(self) -> bool | None:
        return None  # close: a half-closed client sends no more requests

    # httptools' callbacks

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._continue = False
        self._in_head, self._received, self._parsed = True, 0, 0

    # A head that arrives whole in one chunk is measured as it is parsed.
    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        name = name.lower()
        value = value.rstrip(b" \t")  # llhttp keeps trailing whitespace; RFC 9110 does not
        if name == b"expect" and value.lower() == b"100-continue":
            self._continue = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser, serving = self.parser, self.serving
        method = parser.get_method()
        version = parser.get_http_version()
        upgrade = parser.should_upgrade()
        keep_alive = version != "1.0" and parser.should_keep_alive() and not upgrade
        busy = self._answering is not None
        if serving.full():
            self._parsing = None
            if busy:  # the answer before it goes, then the connection
                self._answering.keep_alive = False  # type: ignore[union-attr]
            else:
                self._refuse(503, "Service Unavailable", why="too many connections or requests")
            return
        fast = serving.fast_path
        if fast is not None and method == b"POST" and not busy and not upgrade:
            route = fast.takes(self._url, self._headers)
            if route is not None:
                timer = self.loop.call_later(fast.body_timeout, self._late)
                self._parsing = self._answering = FastRequest(route, keep_alive, timer)
                return
        scope = http_scope(self._url, method.decode("ascii"), version, self._headers)
        scope["server"], scope["client"] = self._local, self._peer
        cycle = AsgiCycle(self, scope, keep_alive=keep_alive, expect_continue=self._continue)
        cycle.scope["extensions"] = {
            ABORT_EXTENSION: self.abort,
            BODY_ARRIVED_EXTENSION: cycle.body_arrived,
        }
        self._parsing = cycle
        if busy:
            self._queue.append((cycle, serving.app))
            self.pause_reading()
        else:
            self._start(cycle, serving.app)

    def on_body(self, body: bytes) -> None:
        if self._parsing is not None:
            self._parsing.feed(body)

    def on_message_complete(self) -> None:
        request = self._parsing
        if isinstance(request, AsgiCycle):
            request.ended()
        elif request is not None:
            body, fast = request.body(), self.serving.fast_path
            if body is not None and fast is not None:
                self.serving.in_flight += 1
                self.serving.workers.start_soon(self._answer_fast, request, fast, body)

    # What the requests call (the rest is Link's)

    def answered(self, request: Request, *, keep_alive: bool) -> None:
        """``request``'s answer is complete: the next one's turn."""
        self._answering = None
        if not keep_alive or self.serving.draining:
            self.close()
            return
        if self.closing():
            return
        if self._queue:
            self._start(*self._queue.popleft())
            return
        self.resume_reading()
        self._arm_head_deadline()
        self._idle_timer = self.loop.call_later(self.serving.limits.keep_alive, self._idle)

    def shutdown(self) -> None:
        """The server stops: close once the answer under way is complete."""
        if self._answering is None:
            self.close()
        else:
            self._answering.keep_alive = False

    # Inside

    def _start(self, cycle: AsgiCycle, app: App) -> None:
        self._answering = cycle
        self.serving.in_flight += 1
        self.serving.workers.start_soon(self._run, cycle, app)

    async def _run(self, cycle: AsgiCycle, app: App) -> None:
        try:
            await cycle.run(app)
        finally:
            self.serving.in_flight -= 1

    async def _answer_fast(self, request: FastRequest, fast: FastPath, body: bytes) -> None:
        try:
            await request.answer(self, fast, body)
        finally:
            self.serving.in_flight -= 1

    def _late(self) -> None:
        request, fast = self._answering, self.serving.fast_path
        if isinstance(request, FastRequest) and fast is not None:
            request.overdue(self, fast)

    def _count(self, size: int) -> None:
        self._parsed += size
        if self._parsed > self.serving.limits.max_head_bytes:
            self._too_large = True
            raise _HeadTooLarge  # the parser's error path answers 431

    def _refuse(self, status: int, text: str, *, why: str | None = None) -> None:
        if not self.closing():
            self.write(refusal(status, text, why=why))
            self.close()

    def _arm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(
            self.serving.limits.head_timeout, self._head_overdue
        )

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self._answering is None and not self._queue:
            self.close()

    def _idle(self) -> None:
        self._idle_timer = None
        if self._answering is None and not self._queue and not self._in_head:
            self.close()

    def _disarm(self) -> None:
        for timer in (self._head_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._idle_timer = None


def _address(value: object) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None
