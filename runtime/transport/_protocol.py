"""The transport seam: what hub and sidecar need from a message bus.

Two implementations stand behind it: NATS (``open_nats``) for real use and
an in-memory bus (``runtime.testing.MemoryBus``) for unit tests of one
module. Code above this seam never imports nats-py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class Message(Protocol):
    """One received message. ``reply`` is set when the sender waits for an answer."""

    @property
    def subject(self) -> str: ...

    @property
    def data(self) -> bytes: ...

    @property
    def reply(self) -> str | None: ...

    async def respond(self, data: bytes) -> None:
        """Answer a request; a no-op when nobody waits (``reply`` is None)."""
        ...


class Subscription(Protocol):
    """Messages of one subject, in arrival order, with bounded buffering.

    Iterating yields messages until the subscription or transport closes.
    When the consumer falls behind, the bus applies its own overflow policy
    (NATS drops for slow consumers; every protocol above retries until it is
    acknowledged, so a drop delays, it never loses).
    """

    @property
    def subject(self) -> str: ...

    def __aiter__(self) -> AsyncIterator[Message]: ...

    async def unsubscribe(self) -> None: ...


ReconnectCallback = Callable[[], Awaitable[None]]


class Transport(Protocol):
    """A connection to the bus.

    ``request`` raises :class:`~runtime.errors.RequestTimeout` (also a builtin
    ``TimeoutError``) when no answer comes in time, :class:`~runtime.errors.NoResponders`
    when nobody listens, :class:`~runtime.errors.TransportClosed` after ``aclose``.
    While disconnected, ``publish`` buffers or fails with ``TransportError``,
    never blocks forever. Subscriptions survive reconnects.
    """

    @property
    def is_connected(self) -> bool: ...

    @property
    def credentials_refused(self) -> bool:
        """The server refused this connection's credentials since it last
        connected (its identity was revoked, or is not admitted yet)."""
        ...

    async def publish(self, subject: str, data: bytes) -> None: ...

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes: ...

    async def subscribe(
        self, subject: str, *, queue: str | None = None, max_pending: int = 4096
    ) -> Subscription: ...

    async def flush(self, timeout: float = 2.0) -> None: ...

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        """Register ``callback`` to run after every reconnect (not the first connect)."""
        ...

    async def aclose(self) -> None: ...
