"""A client's end, as its requests in flight see it: one event that, once
set, cancels every request still waiting on that client, without a watcher
task per request; the request's deadline rides on the same cancel scope.

A request made on a client that nats-py then closes for good could never be
answered there; it must end at once, to be sent again on the client that
replaces it (``_nats_connection``). A task per request that waits for the end and
cancels the request's group did that, at the price of a task group, a
second task and its cancellation for every request (a lone mail makes one
each way). Here each request registers its own cancel scope while it waits;
:meth:`Gone.set` cancels the scopes registered, and a request that begins
after the end is cancelled before it waits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import anyio


class Gone:
    """Set once a client is closed for good: its requests in flight end."""

    __slots__ = ("_asking", "_event")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._asking: set[anyio.CancelScope] = set()

    def set(self) -> None:
        """The client is closed for good: every request waiting on it ends."""
        self._event.set()
        for scope in self._asking:
            scope.cancel()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    @contextmanager
    def asking(self, deadline: float = math.inf) -> Iterator[anyio.CancelScope]:
        """A scope for one request on the client: cancelled when the client
        ends (at once, if it has ended already), or at ``deadline`` (anyio's
        clock): one scope for both, a request's only one. Its
        ``cancelled_caught`` says whether the request was cut short; by the
        end if :meth:`is_set`, else by the deadline."""
        with anyio.CancelScope(deadline=deadline) as scope:
            if self._event.is_set():
                scope.cancel()
            self._asking.add(scope)
            try:
                yield scope
            finally:
                self._asking.discard(scope)
