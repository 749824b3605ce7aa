"""uvicorn, run inside the hub's task group.

The socket is bound by the hub before anything else starts (a port clash
fails at once, and port 0 gives a known port). uvicorn's own signal handlers
are disabled: the hub process owns SIGTERM/SIGINT and stops the server by
setting ``should_exit``, which lets requests in flight finish (bounded).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc
import uvicorn


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

    def __init__(self, app: Any, sock: socket.socket) -> None:
        config = uvicorn.Config(
            app,
            log_config=None,  # keep the hub's logging setup
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
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
