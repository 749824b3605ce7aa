"""``GET /events``: the change feed as server-sent events (docs/hub.md, "Live events").

Each change is one event, ``id: <change id>``, ``event: dispatch|run|deployment``,
``data:`` the row's current JSON view (``GET /dispatches/{id}``'s shape, and
so on) with ``change: {status, at}``, the status that change left. A client
resumes with ``Last-Event-ID`` (or ``?since=``): it gets every change after
that id the hub still holds, in order, once; when some were trimmed already
an ``event: reset`` comes first. Without either it starts at the newest
change; ``?deployment=`` (id or name) keeps one deployment's changes. A
stream opens with a bare ``id:`` line, the id it starts after.

The response is a small ASGI callable of its own rather than sse-starlette
or Starlette's ``StreamingResponse``: sse-starlette finds shutdown through
a server's signal handlers from a task nobody owns, and the hub owns its
signals (its server installs none, ``hub/api/http/``), so its shutdown
would go unseen; ``StreamingResponse`` drives an async
generator it never closes, and stops watching for the client's disconnect
on ASGI 2.4 servers. What a stream needs here is short: write frames as
the feed hands them, a ``: ping`` after ``keep_alive`` of silence, stop on
disconnect, end when the feed ends it, unsubscribe whatever happens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..._errors import HubShuttingDown, InvalidRequest
from ...store import last_change_id, read_changes, resolve_deployment
from ..context import RouteContext
from ..http import ABORT_EXTENSION
from ..requests import is_number
from .feed import ChangeFeed, Follower, Frame

PING = b": ping\n\n"
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}

Emit = Callable[[bytes], Awaitable[None]]


def _reset(since: int, oldest: int | None) -> bytes:
    data = msgspec.json.encode({"since": since, "oldest": oldest})
    return b"event: reset\ndata: %s\n\n" % data


def _start(request: Request) -> int | None:
    """The id to resume after: ``Last-Event-ID`` (a reconnecting EventSource
    keeps its first URL), else ``?since=``, else None (from now on)."""
    for name, text in (
        ("Last-Event-ID", request.headers.get("last-event-id")),
        ("since", request.query_params.get("since")),
    ):
        if text is not None:
            if not is_number(text.strip()):
                raise InvalidRequest(f"{name!r} must be a change id (an integer from 0)")
            return int(text.strip())
    return None


async def pump(feed: ChangeFeed, sub: Follower, since: int, emit: Emit) -> None:
    """Everything ``sub`` asked for, then what the feed hands it, until the
    feed ends it (or the client goes, which cancels this)."""
    store, batch = feed.store, feed.limits.batch
    cursor, told = since, False
    if since > await store.read(last_change_id):
        # An id this database never gave (it was replaced): all it holds is new.
        await emit(_reset(since, None))
        cursor, told = 0, True
    # An id without data dispatches no event but sets the client's last
    # event id: a reconnect before any change resumes from here, not "now".
    await emit(b"id: %d\n\n" % cursor)
    while cursor < sub.live_from:
        changes = await store.read(
            partial(read_changes, after=cursor, limit=batch, upto=sub.live_from)
        )
        first = changes[0].id if changes else sub.live_from + 1
        if first > cursor + 1 and not told:
            # What is missing was trimmed (retention). On PostgreSQL it may
            # also be an id a rolled-back transaction took: a reset then asks
            # the client to re-read for nothing, never hides a change.
            await emit(_reset(since, changes[0].id if changes else None))
            told = True
        if not changes:
            break
        for held in await feed.render([c for c in changes if sub.wants(c)]):
            await emit(held.data)
        cursor = changes[-1].id
    while True:
        frame: Frame | None = None
        with anyio.move_on_after(feed.limits.keep_alive):
            try:
                frame = await sub.frames.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
        if frame is None:
            await emit(PING)
            continue
        # All that is queued goes in one write: the reader offers a batch at
        # once, and a client that keeps up must empty its buffer as fast.
        frames = [frame, *_queued(sub)]
        fresh = [f for f in frames if f.id > cursor]  # a client that resumed past the reader
        if fresh:
            await emit(b"".join(f.data for f in fresh))
            cursor = fresh[-1].id


def _queued(sub: Follower) -> list[Frame]:
    frames = []
    while True:
        try:
            frames.append(sub.frames.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return frames


class EventStream(Response):
    """The stream's response: ``pump`` writing to the client, a watch on its
    disconnect, and ``sub``'s end, whichever way the stream ends."""

    media_type = "text/event-stream"

    def __init__(self, sub: Follower, since: int) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers(_HEADERS)
        self._sub = sub
        self._since = since

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sub = self._sub
        sub.abort = scope.get("extensions", {}).get(ABORT_EXTENSION)
        try:
            with sub.scope:  # cancelled when the client is cut off and no abort is offered
                await send(
                    {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                )

                async def emit(data: bytes) -> None:
                    await send({"type": "http.response.body", "body": data, "more_body": True})

                async with anyio.create_task_group() as tg:

                    async def gone() -> None:
                        while (await receive())["type"] != "http.disconnect":
                            pass
                        tg.cancel_scope.cancel()

                    tg.start_soon(gone)
                    await pump(sub.feed, sub, self._since, emit)
                    tg.cancel_scope.cancel()
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            sub.feed.unsubscribe(sub)


def event_routes(ctx: RouteContext, feed: ChangeFeed | None) -> list[Route]:
    async def events(request: Request) -> Response:
        if feed is None:
            raise HubShuttingDown("this hub does not stream events")
        since = _start(request)
        key = request.query_params.get("deployment") or None
        dep_id = await ctx.store.read(partial(resolve_deployment, key=key)) if key else None
        if request.method == "HEAD":  # headers only: a stream would never end
            return Response(media_type=EventStream.media_type, headers=_HEADERS)
        if since is None:
            since = await ctx.store.read(last_change_id)
        return EventStream(await feed.subscribe(dep_id), since)

    return [Route("/events", events, methods=["GET"])]
