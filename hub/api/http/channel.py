"""A connection as the request answered on it sees it: ``Channel``, and
``Link``, the transport side of ``protocol.Connection`` that implements it
(writes, closing and aborting, reading paused and resumed, waiting while
the client takes no more)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any, Protocol, cast


class Channel(Protocol):
    """What ``cycle`` and ``fast`` ask of their connection."""

    loop: asyncio.AbstractEventLoop
    write_paused: bool  # the client takes no more for now: ``drain`` first

    def write(self, data: bytes) -> None: ...
    def closing(self) -> bool: ...
    def close(self) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    async def drain(self) -> None: ...

    def answered(self, request: Any, *, keep_alive: bool) -> None:
        """The answer is complete: the next request's turn (or the close)."""
        ...


class Link(asyncio.Protocol):
    """The transport of one connection, and its flow control both ways."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.write_paused = False
        self._read_paused = False
        self._drained: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport's subclasses; they have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.write_paused = False
        self._wake_writers()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_writers()

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        """Close the connection now, dropping what is queued for it: with
        SO_LINGER 0 the kernel resets it instead of sending its queue (which
        may be megabytes for a client that does not read) before the FIN."""
        if self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and not self._read_paused and not self.closing():
            self._read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and self._read_paused and not self.closing():
            self._read_paused = False
            self.transport.resume_reading()

    async def drain(self) -> None:
        """Wait until the client takes more of what is written (or is gone)."""
        if not self.write_paused or self.closing():
            return
        waiter = self.loop.create_future()
        self._drained.append(waiter)
        await waiter

    def _wake_writers(self) -> None:
        waiters, self._drained = self._drained, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
