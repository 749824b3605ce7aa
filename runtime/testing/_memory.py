"""An in-process bus behind the same :class:`~runtime.Transport` seam, for unit tests.

It keeps the NATS semantics a module can observe: subject wildcards (``*``
one token, ``>`` the rest), queue groups (one member per group gets each
message), bounded subscriptions that drop the newest message when full,
no-responders, NATS' default ``max_payload`` (a larger message is refused
before it is sent, as nats-py refuses it), and lost connections
(``MemoryBus.disconnect``): nothing is delivered to a disconnected
transport, what it publishes is buffered until ``MemoryBus.reconnect``,
which then runs its ``on_reconnect`` callbacks.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType

import anyio
from anyio.lowlevel import checkpoint

from ..errors import NoResponders, RequestTimeout, TransportClosed, TransportError
from ..loops import Flag, Wakeup
from ..transport import Message, ReconnectCallback, subject_matches, validate_subject
from ..wire import WIRE_MAX_PAYLOAD

log = logging.getLogger(__name__)

_PENDING_LIMIT = 2 * 1024 * 1024  # bytes buffered while disconnected, as nats-py does


@dataclass(frozen=True, slots=True)
class MemoryMessage:
    """A message delivered by a :class:`MemoryBus`."""

    subject: str
    data: bytes
    reply: str | None
    _transport: MemoryTransport = field(repr=False)

    async def respond(self, data: bytes) -> None:
        if self.reply is not None:
            await self._transport.publish(self.reply, data)


class MemorySubscription:
    """A subscription on a :class:`MemoryBus`; iterate it for its messages."""

    def __init__(
        self, transport: MemoryTransport, subject: str, queue: str | None, max_pending: int
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.transport = transport
        self.queue = queue
        self._subject = subject
        self._max_pending = max_pending
        # A deque and a wakeup rather than a memory stream: the drop-newest
        # policy needs no backpressure, and a test that forgets to unsubscribe
        # leaves nothing that warns when collected.
        self._buffer: deque[Message] = deque()
        self._arrived = Wakeup()
        self.closed = False
        self.dropped = 0
        """Messages discarded because this consumer fell behind."""

    @property
    def subject(self) -> str:
        return self._subject

    def _offer(self, message: Message) -> None:
        if self.closed:
            return
        if len(self._buffer) >= self._max_pending:
            self.dropped += 1
            return
        self._buffer.append(message)
        self._arrived.set()

    def __aiter__(self) -> MemorySubscription:
        return self

    async def __anext__(self) -> Message:
        await checkpoint()
        while not self._buffer:
            if self.closed:
                raise StopAsyncIteration
            await self._arrived.wait()
        return self._buffer.popleft()

    async def unsubscribe(self) -> None:
        self._close()
        await checkpoint()

    def _close(self) -> None:
        # Like NATS, buffered messages are discarded; a waiting reader sees the end.
        if not self.closed:
            self.closed = True
            self.transport._bus._subscriptions.remove(self)
            self._buffer.clear()
            self._arrived.set()


class _Reply:
    """One outstanding request's answer slot."""

    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self.done = anyio.Event()
        self.data = b""
        self.error: Exception | None = None

    def resolve(self, data: bytes | None = None, error: Exception | None = None) -> None:
        if not self.done.is_set():
            self.data, self.error = data or b"", error
            self.done.set()


class MemoryTransport:
    """One connection to a :class:`MemoryBus`."""

    def __init__(self, bus: MemoryBus, name: str, inbox_prefix: str = "_INBOX") -> None:
        self._bus = bus
        self.name = name
        self.inbox_prefix = inbox_prefix
        self._connected = True
        self._refused = False
        self._closed = False
        self._up = Flag(True)  # flush waits on it while disconnected
        self._outbox: deque[tuple[str, bytes, str | None]] = deque()
        self._outbox_bytes = 0
        self._callbacks: list[ReconnectCallback] = []

    @property
    def is_connected(self) -> bool:
        return self._connected and not self._closed

    @property
    def credentials_refused(self) -> bool:
        return self._refused

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosed(f"transport {self.name!r} is closed")

    async def publish(self, subject: str, data: bytes) -> None:
        await self._send(subject, data, None)

    async def _send(self, subject: str, data: bytes, reply: str | None) -> None:
        self._check_open()
        validate_subject(subject, wildcards=False)
        if len(data) > self._bus.max_payload:
            raise TransportError(f"publish to {subject}: maximum payload exceeded")
        if self._connected:
            self._bus._route(subject, data, reply)
        elif self._outbox_bytes + len(data) > _PENDING_LIMIT:
            raise TransportError(f"publish to {subject}: outbound buffer full while disconnected")
        else:
            self._outbox.append((subject, data, reply))
            self._outbox_bytes += len(data)
        await checkpoint()

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        self._check_open()
        inbox = f"{self.inbox_prefix}.{next(self._bus._ids)}"
        answer = _Reply(self)
        self._bus._replies[inbox] = answer
        try:
            await self._send(subject, data, inbox)
            with anyio.move_on_after(timeout):
                await answer.done.wait()
        finally:
            del self._bus._replies[inbox]
        if not answer.done.is_set():
            raise RequestTimeout(f"request to {subject}: timed out")
        if answer.error is not None:
            raise answer.error
        return answer.data

    async def subscribe(
        self, subject: str, *, queue: str | None = None, max_pending: int = 4096
    ) -> MemorySubscription:
        self._check_open()
        validate_subject(subject, wildcards=True)
        sub = MemorySubscription(self, subject, queue, max_pending)
        self._bus._subscriptions.append(sub)
        await checkpoint()
        return sub

    async def flush(self, timeout: float = 2.0) -> None:
        self._check_open()
        if not await self._up.wait(timeout):
            raise RequestTimeout("flush: timed out while disconnected")
        self._check_open()
        await checkpoint()

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        self._callbacks.append(callback)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sub in [s for s in self._bus._subscriptions if s.transport is self]:
            sub._close()
        for answer in self._bus._replies.values():
            if answer.transport is self:
                answer.resolve(error=TransportClosed(f"transport {self.name!r} closed"))
        self._up.set()  # a flush waiting for the reconnect sees the close instead
        await checkpoint()

    async def __aenter__(self) -> MemoryTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class MemoryBus:
    """The in-process "server": transports connect to it by name."""

    def __init__(self, *, max_payload: int = WIRE_MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._subscriptions: list[MemorySubscription] = []
        self._replies: dict[str, _Reply] = {}
        self._ids = itertools.count(1)

    def connect(self, name: str = "", *, inbox_prefix: str = "_INBOX") -> MemoryTransport:
        """A new connection; ``inbox_prefix`` starts its requests' reply
        subjects, as nats-py's option of that name does."""
        return MemoryTransport(self, name or f"memory-{next(self._ids)}", inbox_prefix)

    async def disconnect(self, transport: MemoryTransport) -> None:
        """Simulate a lost connection: ``transport`` sends and receives nothing."""
        if transport._connected and not transport._closed:
            transport._connected = False
            transport._up.clear()
        await checkpoint()

    async def revoke(self, transport: MemoryTransport) -> None:
        """Simulate a server that no longer admits ``transport``'s identity:
        disconnected, and refused at every attempt until :meth:`reconnect`."""
        await self.disconnect(transport)
        transport._refused = True

    async def reconnect(self, transport: MemoryTransport) -> None:
        """End a simulated outage: flush what it buffered, then run its callbacks."""
        if transport._connected or transport._closed:
            return
        transport._connected = True
        transport._refused = False
        while transport._outbox:
            self._route(*transport._outbox.popleft())
        transport._outbox_bytes = 0
        transport._up.set()
        for callback in list(transport._callbacks):
            try:
                await callback()
            except Exception:
                log.exception("reconnect callback %r failed", callback)

    def _route(self, subject: str, data: bytes, reply: str | None) -> None:
        answer = self._replies.get(subject)
        if answer is not None:
            if answer.transport.is_connected:
                answer.resolve(data)
            return
        plain: list[MemorySubscription] = []
        groups: dict[tuple[str, str], list[MemorySubscription]] = {}
        for sub in self._subscriptions:
            if sub.transport.is_connected and subject_matches(sub.subject, subject):
                if sub.queue is None:
                    plain.append(sub)
                else:
                    groups.setdefault((sub.subject, sub.queue), []).append(sub)
        targets = plain + [random.choice(members) for members in groups.values()]
        if not targets:
            waiting = self._replies.get(reply) if reply is not None else None
            if waiting is not None:
                waiting.resolve(error=NoResponders(f"request to {subject}: no responders"))
            return
        for sub in targets:
            sub._offer(MemoryMessage(subject, data, reply, sub.transport))
