"""uvicorn, run inside the hub's task group.

The socket is bound by the hub before anything else starts (a port clash
fails at once, and port 0 gives a known port). uvicorn's own signal handlers
are disabled: the hub process owns SIGTERM/SIGINT and stops the server by
setting ``should_exit``, which lets requests in flight finish (bounded).

HTTP/1.1 is parsed by httptools (llhttp; about half the server CPU per
request of pure-Python h11, docs/performance-notebook.md). What one client
may hold is bounded (``HttpLimits``; figures in docs/operations.md,
"Security"): the size of a request's head, the
idle time between requests (uvicorn's keep-alive), the connections and
requests at once (uvicorn's ``limit_concurrency``: past it, 503 at once),
and the time a request's head may take to arrive. uvicorn has no bound for
the first and the last: a client that sends a head byte by byte, or a
connection that never sends one, would hold its connection for ever, and an
endless header line would grow in memory. ``_Guarded`` adds both.

``scope["extensions"][BODY_ARRIVED_EXTENSION]`` tells whether a request's
body has arrived whole: the mail lane then reads it without arming the body
deadline, which is most requests (a client writes head and body at once).

``_Guarded`` answers the requests a :class:`Lane` takes itself, with no
ASGI cycle: the hub's mail (``lane.py``), where the ASGI cycle and the
middleware around the app cost about a third of the hub's CPU per mail
(docs/performance-notebook.md). It keeps uvicorn's order of answers on a
connection: a lane request stands where uvicorn keeps its current request
(``_LaneCycle``), so a request pipelined behind it waits in uvicorn's queue.
Its answers are tasks of the server's own task group: uvicorn's graceful
shutdown waits for them through their connections, which stay open until
answered; what outlives it is cancelled and its connection closed, as is an
answer that fails.

``_Guarded`` also offers each request ``scope["extensions"][ABORT_EXTENSION]``,
which closes its connection at once: an event stream whose client stopped
reading is cut off with it (``events.py``). Without it the stream could
only return unfinished, and uvicorn would close the connection gracefully,
waiting to flush to a client that does not read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, cast

import anyio
import anyio.abc
import uvicorn
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

log = logging.getLogger("mailrun.hub.http")

ABORT_EXTENSION = "mailrun.abort"
BODY_ARRIVED_EXTENSION = "mailrun.body_arrived"


@dataclass(frozen=True)
class HttpLimits:
    """What one client may hold of the HTTP server."""

    head_timeout: float = 10.0  # seconds from connecting (or from the last answer) to a full head
    keep_alive: int = 5  # seconds a connection may idle between requests
    max_head_bytes: int = 16 * 1024  # request line and headers
    max_connections: int = 2048  # open connections, or requests in flight; past it: 503


class Lane(Protocol):
    """Requests the HTTP protocol answers itself, with a JSON body."""

    body_timeout: float
    """Seconds a taken request's body may take to arrive after its head."""

    def takes(self, target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
        """The route of a POST to ``target`` (lowercased ``headers``) if the
        lane answers it; None sends it to the app."""
        ...

    async def answer(self, route: str, body: bytes) -> tuple[int, bytes]:
        """The status and body of the answer; never raises."""
        ...

    def late(self) -> tuple[int, bytes]:
        """The answer to a body that did not arrive within ``body_timeout``."""
        ...


class _LaneCycle:
    """A request the lane answers, where uvicorn keeps its current request's
    cycle: uvicorn reads and sets these attributes of it (its shutdown asks
    for the connection to close after the answer; a lost connection marks
    it disconnected and wakes its reader, which a lane request has not)."""

    response_complete = False
    disconnected = False

    def __init__(
        self, lane: Lane, route: str, keep_alive: bool, timer: asyncio.TimerHandle
    ) -> None:
        self.lane = lane
        self.route = route
        self.keep_alive = keep_alive
        self.timer = timer
        self.chunks: list[bytes] | None = []  # None once the body is whole
        self.message_event = self

    def set(self) -> None:
        pass


class _Guarded(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request's head and
    a bound on its size.

    The deadline starts when the connection is made and again when an answer
    is complete; when it passes with no request in progress (the next head
    has not fully arrived), the connection is closed, whatever it sent
    meanwhile: trickling bytes does not extend it. A head (request line and
    headers) larger than ``max_head_bytes`` gets 431 and the connection is
    closed: counted as it arrives, since httptools would buffer an unfinished
    header line without limit."""

    head_timeout = HttpLimits.head_timeout
    max_head_bytes = HttpLimits.max_head_bytes
    lane: Lane | None = None
    answers: anyio.abc.TaskGroup  # owns the lane's answers; set by HttpServer while it serves
    _head_timer: asyncio.TimerHandle | None = None
    _in_head = False
    _received = 0  # bytes of an unfinished head
    _parsed = 0  # bytes of its request line and headers parsed so far
    _too_large = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        if isinstance(self.cycle, _LaneCycle):
            self.cycle.timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_head and not self.transport.is_closing():
            # The head is unfinished after this chunk: the chunk is head
            # (from the head's first byte on; a pipelined body's tail before
            # it counts too, erring on the side of refusing).
            self._received += len(data)
            if self._received > self.max_head_bytes:
                self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._received, self._parsed = True, 0, 0
        self._extensions: dict[str, Any] = {ABORT_EXTENSION: self._abort}
        self.scope["extensions"] = self._extensions

    # A head that arrives whole in one chunk is measured as it is parsed.
    def on_url(self, url: bytes) -> None:
        self._parse(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parse(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        lane = self.lane
        route = self._lane_route(lane)
        if lane is not None and route is not None:
            keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
            timer = self.loop.call_later(lane.body_timeout, self._lane_late)
            self.cycle = cast(RequestResponseCycle, _LaneCycle(lane, route, keep_alive, timer))
            return
        super().on_headers_complete()
        if self.cycle is not None:
            self._extensions[BODY_ARRIVED_EXTENSION] = partial(_body_arrived, self.cycle)
            self.cycle.transport = cast(asyncio.Transport, Coalesced(self.transport, self.loop))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if isinstance(cycle, _LaneCycle):
            if cycle.chunks is not None:
                cycle.chunks.append(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if not isinstance(cycle, _LaneCycle):
            super().on_message_complete()
        elif cycle.chunks is not None:
            cycle.timer.cancel()
            body, cycle.chunks = b"".join(cycle.chunks), None
            self.answers.start_soon(self._lane_answer, cycle, body)

    def _lane_route(self, lane: Lane | None) -> str | None:
        """The lane's route for the request whose head just arrived, if it takes it."""
        if lane is None or self.parser.get_method() != b"POST" or self.parser.should_upgrade():
            return None
        if self.cycle is not None and not self.cycle.response_complete:
            return None  # pipelined behind another: it waits in uvicorn's queue
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            return None  # uvicorn answers 503
        return lane.takes(self.url, self.headers)

    async def _lane_answer(self, cycle: _LaneCycle, body: bytes) -> None:
        try:
            self._lane_write(cycle, *await cycle.lane.answer(cycle.route, body))
        except Exception:
            # A fault in one answer must not take the server (and every other
            # answer in its task group) down with it: its connection goes.
            log.exception("the answer to a %s failed", cycle.route)
        finally:
            if not cycle.response_complete:  # failed, or cancelled at shutdown
                self.transport.close()

    def _lane_late(self) -> None:
        cycle = self.cycle
        if isinstance(cycle, _LaneCycle) and cycle.chunks is not None:
            cycle.chunks, cycle.keep_alive = None, False
            self._lane_write(cycle, *cycle.lane.late())

    def _lane_write(self, cycle: _LaneCycle, status: int, body: bytes) -> None:
        cycle.response_complete = True
        if self.transport.is_closing():
            return  # the client left: the outcome stands, unanswered
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body))
        head.append(b"\r\n" if cycle.keep_alive else b"connection: close\r\n\r\n")
        self.transport.write(b"".join(head) + body)
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()

    def send_400_response(self, msg: str) -> None:
        if self._too_large:
            self._refuse_head()
        else:
            super().send_400_response(msg)

    def _abort(self) -> None:
        """Close the connection now, dropping what is queued for it: with
        SO_LINGER 0 the kernel resets it instead of sending its queue (which
        may be megabytes for a client that does not read) before the FIN."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def _parse(self, size: int) -> None:
        self._parsed += size
        if self._parsed > self.max_head_bytes:
            self._too_large = True
            raise _HeadTooLarge  # the parser's error path answers: send_400_response

    def _refuse_head(self) -> None:
        body = b"Request head too large."
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        self.transport.close()

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        if not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_overdue)

    def _disarm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_overdue(self) -> None:
        self._head_timer = None
        idle = (self.cycle is None or self.cycle.response_complete) and not self.pipeline
        if idle and not self.transport.is_closing():
            self.transport.close()


class Coalesced:
    """A response's writes within one turn of the loop, as one write.

    uvicorn writes a response's head and its body apart: two segments on
    the wire (the socket has TCP_NODELAY) and, as often as not, two wakes
    of the client for one answer. The head is held until the body follows
    in the same turn, as it does for every answer of known length, or until
    the turn ends (a stream's head goes out alone, as before). The server's
    CPU per request fell by a tenth to a quarter, the load client's by a
    tenth (docs/performance-notebook.md)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(self._held + data)
            self._held = None

    def flush(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _HeadTooLarge(Exception):
    pass


def _body_arrived(cycle: RequestResponseCycle) -> bool:
    return not cycle.more_body


def _guarded(limits: HttpLimits, lane: Lane | None) -> type[_Guarded]:
    attributes = {
        "head_timeout": limits.head_timeout,
        "max_head_bytes": limits.max_head_bytes,
        "lane": lane,
    }
    return type("GuardedHttpToolsProtocol", (_Guarded,), attributes)


def _allow_open_files(needed: int) -> None:
    """Raise this process's soft limit on open files to ``needed`` (within the
    hard limit): the connection limit means nothing past the descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < needed:
        log.warning("open files limited to %d: fewer HTTP connections than configured", target)


class _Uvicorn(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The hub owns signal handling; uvicorn's handlers would replace ours.
        yield


class HttpServer:
    """uvicorn on a socket bound beforehand, stopped by :meth:`stop` or
    cancellation; ``lane`` answers the requests it takes without ``app``."""

    def __init__(
        self,
        app: Any,
        sock: socket.socket,
        limits: HttpLimits | None = None,
        *,
        lane: Lane | None = None,
    ) -> None:
        limits = limits or HttpLimits()
        self._protocol = _guarded(limits, lane)
        config = uvicorn.Config(
            app,
            http=self._protocol,
            log_config=None,  # keep the hub's logging setup
            log_level="warning",
            access_log=False,
            # Nothing in the hub reads the client's address, and a header must
            # not be able to say what it is.
            proxy_headers=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=limits.keep_alive,
            limit_concurrency=limits.max_connections,
        )
        # The store, NATS, logs and the listening socket need a few more.
        _allow_open_files(limits.max_connections + 256)
        self._server = _Uvicorn(config)
        self._sock = sock
        self._done = anyio.Event()

    def stop(self) -> None:
        self._server.should_exit = True

    async def shutdown(self) -> None:
        """Stop taking connections and wait until requests in flight are answered."""
        self.stop()
        await self._done.wait()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._serve)
            try:
                with anyio.fail_after(10):
                    await self._server.ready.wait()
                if not self._server.started:
                    raise OSError("the HTTP server did not start")
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self.stop()

    async def _serve(self) -> None:
        # Shielded so that cancellation becomes uvicorn's own graceful
        # shutdown (should_exit) instead of tearing it down mid-response.
        try:
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as answers:
                    self._protocol.answers = answers
                    await self._server.serve(sockets=[self._sock])
                    # uvicorn waited (bounded) for every connection to close,
                    # and a lane request holds its connection open until it is
                    # answered: what is left outlived the graceful shutdown, as
                    # the requests uvicorn cancels did.
                    answers.cancel_scope.cancel()
        finally:
            self._done.set()


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    return sock
