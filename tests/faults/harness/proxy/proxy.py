"""A loopback TCP proxy between one client process and nats-server that
injects faults into chosen NATS frames.

Give the client ``proxy.url`` instead of the server's. Rules pick message
frames (``PUB``/``HPUB`` on their way to the server, ``MSG``/``HMSG`` on
their way to the client) by subject pattern and direction, and drop,
duplicate or delay them; control lines always pass. A delayed frame is
written later while the frames behind it go on (so it can arrive after a
retry of itself). ``blackhole()`` forwards nothing at all, both ways, on
every connection, without closing a socket, until ``heal()``: a partition.
``cut()`` closes every connection and refuses new ones (accepted, then
closed at once) until ``restore()``: the server seems gone. Rules and
modes change at any time; ``counts`` and each rule's ``hits`` say what
was done.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from runtime.loops import StackedContext
from tests.support import free_port

from .natsproto import Frame, FrameParser, ProtocolError, subject_matches

log = logging.getLogger("mailrun.tests.proxy")

Direction = Literal["to_server", "to_client"]
Action = Literal["drop", "duplicate", "delay"]
DIRECTIONS: tuple[Direction, Direction] = ("to_server", "to_client")
_READ_SIZE = 65536
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@dataclass(eq=False)
class Rule:
    """Applies ``action`` to message frames matching all of its conditions."""

    action: Action
    subject: str = ">"
    direction: Direction | Literal["both"] = "both"
    delay_ms: int = 0
    times: int | None = None
    """Only the first ``times`` matching frames (None: every one)."""
    match: Callable[[Frame], bool] | None = None
    """An extra condition on the frame (its payload, its reply subject)."""
    hits: int = 0

    def applies(self, direction: Direction, frame: Frame) -> bool:
        if frame.subject is None or (self.times is not None and self.hits >= self.times):
            return False
        if self.direction not in ("both", direction):
            return False
        if not subject_matches(self.subject, frame.subject):
            return False
        return self.match is None or self.match(frame)


@dataclass(eq=False)
class _Connection:
    client: anyio.abc.SocketStream
    server: anyio.abc.SocketStream
    tg: anyio.abc.TaskGroup
    locks: dict[Direction, anyio.Lock] = field(
        default_factory=lambda: {d: anyio.Lock() for d in DIRECTIONS}
    )
    closed: anyio.Event = field(default_factory=anyio.Event)

    async def send(self, direction: Direction, data: bytes) -> None:
        # One writer at a time per socket: delayed frames are written by
        # their own tasks, and two writes must never interleave.
        async with self.locks[direction]:
            await (self.server if direction == "to_server" else self.client).send(data)


class NatsFaultProxy(StackedContext):
    """Async context manager; serves until the block ends."""

    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream must be nats://host:port, not {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self.host = host
        # Chosen, not the OS's pick: a cut gives the port up, and the OS
        # hands ports out of its pick's range to outgoing connections too.
        self.port = port if port is not None else free_port(host)
        self.rules: list[Rule] = []
        self.counts: Counter[str] = Counter()
        """``connections``, ``refused``, ``upstream_failed``, and per direction
        ``<direction>.forwarded|dropped|duplicated|delayed|blackholed``."""
        self.blackholed = False
        self.is_cut = False
        self._connections: set[_Connection] = set()
        self._tg: anyio.abc.TaskGroup
        self._listening = anyio.CancelScope()
        self._not_listening = anyio.Event()

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def connections(self) -> int:
        """Client connections proxied right now."""
        return len(self._connections)

    def count(self, what: str) -> int:
        """``what`` summed over both directions (``"dropped"``, ``"forwarded"``...)."""
        return sum(self.counts[f"{d}.{what}"] for d in DIRECTIONS)

    # --- faults -----------------------------------------------------------------

    def add_rule(
        self,
        action: Action,
        subject: str = ">",
        *,
        direction: Direction | Literal["both"] = "both",
        delay_ms: int = 0,
        times: int | None = None,
        match: Callable[[Frame], bool] | None = None,
    ) -> Rule:
        """Add a rule (the first rule that applies to a frame decides)."""
        if action == "delay" and delay_ms <= 0:
            raise ValueError("a delay rule needs delay_ms > 0")
        rule = Rule(action, subject, direction, delay_ms, times, match)
        self.rules.append(rule)
        return rule

    def remove_rule(self, rule: Rule) -> None:
        self.rules.remove(rule)

    def clear(self) -> None:
        """Remove every rule (blackhole and cut stay as they are)."""
        self.rules.clear()

    def blackhole(self) -> None:
        self.blackholed = True

    def heal(self) -> None:
        self.blackholed = False

    async def cut(self) -> None:
        """Close every connection and stop listening: connecting is refused
        (ECONNREFUSED, as from a dead server) until :meth:`restore`."""
        self.is_cut = True
        self._listening.cancel()
        await self._not_listening.wait()
        for conn in list(self._connections):
            conn.tg.cancel_scope.cancel()
        with anyio.fail_after(5):
            for conn in list(self._connections):
                await conn.closed.wait()

    async def restore(self) -> None:
        """Listen again, on the same port."""
        if self.is_cut:
            self._accept(await self._bind())
            self.is_cut = False

    # --- serving ----------------------------------------------------------------

    async def _open(self, stack: AsyncExitStack) -> None:
        # Bound first: nothing is left to undo when the port is taken.
        listener = await self._bind()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(self._tg.cancel_scope.cancel)
        self._accept(listener)

    async def _bind(self) -> anyio.abc.Listener[anyio.abc.SocketStream]:
        listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        self.port = listener.extra(SocketAttribute.local_port)
        return listener

    def _accept(self, listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> None:
        self._listening = scope = anyio.CancelScope()
        self._not_listening = stopped = anyio.Event()

        async def accept() -> None:
            try:
                with scope:
                    async with listener:
                        # Connections live in the proxy's task group: a cut
                        # stops the listener first, then ends them itself.
                        await listener.serve(self._serve, task_group=self._tg)
            finally:
                stopped.set()

        self._tg.start_soon(accept)

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        closed = anyio.Event()
        try:
            async with client:
                server = await self._upstream()
                if server is None:
                    return
                async with server, anyio.create_task_group() as tg:
                    conn = _Connection(client, server, tg, closed=closed)
                    self._connections.add(conn)
                    self.counts["connections"] += 1
                    try:
                        tg.start_soon(self._pump, conn, "to_server")
                        tg.start_soon(self._pump, conn, "to_client")
                        await anyio.sleep_forever()
                    finally:
                        self._connections.discard(conn)
        finally:
            closed.set()  # both sockets are closed by now

    async def _upstream(self) -> anyio.abc.SocketStream | None:
        """A connection to the server, or None (the client's is closed then)."""
        if not self.is_cut:
            try:
                server = await anyio.connect_tcp(*self.upstream)
            except OSError as exc:
                log.debug("upstream %s:%d: %r", *self.upstream, exc)
                self.counts["upstream_failed"] += 1
                return None
            if not self.is_cut:
                return server
            await server.aclose()
        self.counts["refused"] += 1
        return None

    async def _pump(self, conn: _Connection, direction: Direction) -> None:
        source = conn.client if direction == "to_server" else conn.server
        parser = FrameParser()
        try:
            while True:
                data = await source.receive(_READ_SIZE)
                now = [
                    raw
                    for frame in parser.feed(data)
                    for raw in self._route(conn, direction, frame)
                ]
                if now:
                    await conn.send(direction, b"".join(now))
        except _GONE:
            pass  # one side went away: the connection ends, as with a real server
        except ProtocolError as exc:
            log.warning("closing a connection: %s", exc)
        finally:
            conn.tg.cancel_scope.cancel()

    def _route(self, conn: _Connection, direction: Direction, frame: Frame) -> list[bytes]:
        """What to write for ``frame`` now (delayed frames are scheduled here)."""
        if self.blackholed:
            self.counts[f"{direction}.blackholed"] += 1
            return []
        rule = next((r for r in self.rules if r.applies(direction, frame)), None)
        if rule is None:
            self.counts[f"{direction}.forwarded"] += 1
            return [frame.raw]
        rule.hits += 1
        if rule.action == "drop":
            self.counts[f"{direction}.dropped"] += 1
            return []
        if rule.action == "duplicate":
            self.counts[f"{direction}.duplicated"] += 1
            return [frame.raw, frame.raw]
        self.counts[f"{direction}.delayed"] += 1
        conn.tg.start_soon(self._later, conn, direction, frame.raw, rule.delay_ms / 1000)
        return []

    async def _later(
        self, conn: _Connection, direction: Direction, raw: bytes, delay: float
    ) -> None:
        await anyio.sleep(delay)
        if self.blackholed:
            self.counts[f"{direction}.blackholed"] += 1
            return
        try:
            await conn.send(direction, raw)
        except _GONE:
            conn.tg.cancel_scope.cancel()
