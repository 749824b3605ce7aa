"""uvicorn, run inside the hub's task group.

The socket is bound by the hub before anything else starts (a port clash
fails at once, and port 0 gives a known port). uvicorn's own signal handlers
are disabled: the hub process owns SIGTERM/SIGINT and stops the server by
setting ``should_exit``, which lets requests in flight finish (bounded).

What one client may hold is bounded (``HttpLimits``; figures in
docs/operations.md, "Security"): the size of a request's head (h11), the
idle time between requests (uvicorn's keep-alive), the connections and
requests at once (uvicorn's ``limit_concurrency``: past it, 503 at once),
and the time a request's head may take to arrive. uvicorn has no bound for
that last one: a client that sends a head byte by byte, or a connection that
never sends one, would hold its connection for ever. ``_HeadDeadline`` adds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("mailrun.hub.http")


@dataclass(frozen=True)
class HttpLimits:
    """What one client may hold of the HTTP server."""

    head_timeout: float = 10.0  # seconds from connecting (or from the last answer) to a full head
    keep_alive: int = 5  # seconds a connection may idle between requests
    max_head_bytes: int = 16 * 1024  # request line and headers
    max_connections: int = 2048  # open connections, or requests in flight; past it: 503


class _HeadDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's head.

    The deadline starts when the connection is made and again when an answer
    is complete; it is met once the whole head of the next request arrived
    (h11 has left IDLE). A connection that misses it is closed, whatever it
    sent meanwhile: trickling bytes does not extend it."""

    head_timeout = HttpLimits.head_timeout
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

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
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def _guarded_h11(head_timeout: float) -> type[asyncio.Protocol]:
    return type("GuardedH11Protocol", (_HeadDeadline,), {"head_timeout": head_timeout})


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
    """uvicorn on a socket bound beforehand, stopped by :meth:`stop` or cancellation."""

    def __init__(self, app: Any, sock: socket.socket, limits: HttpLimits | None = None) -> None:
        limits = limits or HttpLimits()
        config = uvicorn.Config(
            app,
            http=_guarded_h11(limits.head_timeout),
            log_config=None,  # keep the hub's logging setup
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=limits.keep_alive,
            h11_max_incomplete_event_size=limits.max_head_bytes,
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
                await self._server.serve(sockets=[self._sock])
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
