"""``GET /events`` as tests read it: one open stream, event by event, under a
deadline, parsed by the CLI's own parser (``mailrun watch``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import msgspec

from hub.cli.operating.watch import Event, parse_sse

Seen = tuple[int, str, str, str]
"""(change id, kind, row id, the change's status)."""


class Stream:
    """One open ``/events`` response. ``last_id`` is the resume point: the
    last ``id:`` line read, a bare one (the stream's start) included."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._events = _events(response)
        self.last_id: int | None = None

    async def next(self, timeout: float = 10.0) -> Event:
        """The next event with data (a change, or a reset)."""
        with anyio.fail_after(timeout):
            while True:
                event = await anext(self._events)
                if event.id is not None:
                    self.last_id = event.id
                if event.data:
                    return event

    async def start(self, timeout: float = 10.0) -> int:
        """The id the stream starts after (its first, bare ``id:`` line)."""
        with anyio.fail_after(timeout):
            while self.last_id is None:
                event = await anext(self._events)
                assert not event.data, event
                self.last_id = event.id
        return self.last_id

    async def seen(self, timeout: float = 10.0) -> Seen:
        event = await self.next(timeout)
        data = msgspec.json.decode(event.data[0])
        assert event.id is not None, event
        return event.id, event.kind, data["id"], data["change"]["status"]

    async def take(self, n: int) -> list[tuple[str, str, str]]:
        """(kind, row id, the change's status) of the next ``n`` events."""
        return [(await self.seen())[1:] for _ in range(n)]


async def _events(response: httpx.Response) -> AsyncIterator[Event]:
    block: list[str] = []
    async for line in response.aiter_lines():
        block.append(line)
        if not line:
            for event in parse_sse(block):
                yield event
            block = []


@asynccontextmanager
async def open_stream(
    http: httpx.AsyncClient, path: str = "/events", **headers: str
) -> AsyncIterator[Stream]:
    async with http.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)
