"""The hub's HTTP server: connections accepted on a socket bound up front,
each answer a task of one task group, and a graceful stop.

The socket is bound by the hub before anything else starts, or inherited
from ``mailrun up`` (hub._listeners). The server installs no
signal handlers: the hub process owns SIGTERM/SIGINT and stops it with
:meth:`HttpServer.stop` (or by cancelling :meth:`HttpServer.run`).

A stop closes the listening socket (new connections are refused, or, while
``up`` holds the same socket, wait for the next hub), closes every idle
connection and asks
the others to close after the answer under way; those answers get
``HttpLimits.graceful`` seconds, and what outlives it is cancelled and its
connection closed. The serving runs shielded, so the hub's cancellation
becomes this graceful stop instead of tearing answers down mid-write.
"""

from __future__ import annotations

import asyncio
import socket
from functools import partial
from typing import Any

import anyio
import anyio.abc

from ..._listeners import BACKLOG
from .fast import FastPath
from .limits import HttpLimits, allow_open_files
from .protocol import Connection
from .serving import Serving


class HttpServer:
    """``app`` (ASGI) served over HTTP/1.1 on a socket bound beforehand,
    until :meth:`stop` or cancellation; ``fast_path`` answers the requests it
    takes without the app."""

    def __init__(
        self,
        app: Any,
        sock: socket.socket,
        limits: HttpLimits | None = None,
        *,
        fast_path: FastPath | None = None,
    ) -> None:
        self._app = app
        self._sock = sock
        self._limits = limits or HttpLimits()
        self._fast_path = fast_path
        # The store, NATS, logs and the listening socket need a few more.
        allow_open_files(self._limits.max_connections + 256)
        self._stopping = anyio.Event()
        self._done = anyio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def shutdown(self) -> None:
        """Stop taking connections and wait until requests in flight are answered."""
        self.stop()
        await self._done.wait()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self._serve)
            task_status.started()
            try:
                await self._stopping.wait()
            finally:
                self.stop()

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as answers:
                    serving = Serving(self._app, self._limits, self._fast_path, answers)
                    loop = asyncio.get_running_loop()
                    server = await loop.create_server(
                        partial(Connection, serving), sock=self._sock, backlog=BACKLOG
                    )
                    task_status.started()
                    await self._stopping.wait()
                    server.close()  # this process's listening socket: no new connections here
                    serving.drain()
                    with anyio.move_on_after(self._limits.graceful):
                        await serving.emptied.wait()
                    # What is left outlived the grace: cancelled, its connection closed.
                    answers.cancel_scope.cancel()
        finally:
            self._done.set()
