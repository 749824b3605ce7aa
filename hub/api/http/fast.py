"""Requests a connection answers itself, with no ASGI cycle: the ``FastPath``
a server is given (the hub's mail, ``hub/api/mail.py``), and one such
request while its body arrives and its answer is made.

Through the ASGI app and its middleware a mail cost about a third more of
the hub's CPU (docs/performance.md). A fast request keeps every rule an
app request has: it is answered in its turn on its connection, its body
has a deadline (``FastPath.body_timeout``, then 408 and the connection
closes), its answer is a task of the server's task group (a shutdown waits
for it, within its grace), and a fault in it closes its connection only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from .channel import Channel
from .wire import json_answer

log = logging.getLogger("mailrun.hub.http")


class FastPath(Protocol):
    """Requests the server answers itself, with a JSON body."""

    body_timeout: float
    """Seconds a taken request's body may take to arrive after its head."""

    def takes(self, target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
        """The route of a POST to ``target`` (lowercased ``headers``) if the
        fast path answers it; None sends it to the app."""
        ...

    async def answer(self, route: str, body: bytes) -> tuple[int, bytes]:
        """The status and body of the answer; never raises."""
        ...

    def late(self) -> tuple[int, bytes]:
        """The answer to a body that did not arrive within ``body_timeout``."""
        ...


class FastRequest:
    """A request the fast path takes: its body as it arrives, then its answer."""

    __slots__ = ("chunks", "keep_alive", "response_complete", "route", "timer")

    def __init__(self, route: str, keep_alive: bool, timer: asyncio.TimerHandle) -> None:
        self.route = route
        self.keep_alive = keep_alive
        self.timer = timer  # the body's deadline
        self.chunks: list[bytes] | None = []  # None once the body is whole (or late)
        self.response_complete = False

    def feed(self, chunk: bytes) -> None:
        if self.chunks is not None:
            self.chunks.append(chunk)

    def body(self) -> bytes | None:
        """The whole body, once, when it has arrived in time; else None."""
        if self.chunks is None:
            return None
        self.timer.cancel()
        body, self.chunks = b"".join(self.chunks), None
        return body

    def lost(self) -> None:
        self.timer.cancel()

    async def answer(self, conn: Channel, fast: FastPath, body: bytes) -> None:
        """Answer with ``fast``'s answer to ``body``; never raises."""
        try:
            self._write(conn, *await fast.answer(self.route, body))
        except Exception:
            # A fault in one answer must not take the server (and every other
            # answer in its task group) down with it: its connection goes.
            log.exception("the answer to a %s failed", self.route)
        finally:
            if not self.response_complete:  # failed, or cancelled at shutdown
                conn.close()

    def overdue(self, conn: Channel, fast: FastPath) -> None:
        """The body's deadline passed: if it is still arriving, 408 and close."""
        if self.chunks is not None:
            self.chunks, self.keep_alive = None, False
            self._write(conn, *fast.late())

    def _write(self, conn: Channel, status: int, body: bytes) -> None:
        self.response_complete = True
        if conn.closing():
            return  # the client left: the outcome stands, unanswered
        conn.write(json_answer(status, body, keep_alive=self.keep_alive))
        conn.answered(self, keep_alive=self.keep_alive)
