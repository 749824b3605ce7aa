"""One reader of the change table for every open ``GET /events`` stream.

The reader polls ``change`` by id (a range read of the primary key, a batch
at a time) every ``poll_interval`` while a stream is open, and not at all
while none is. Polling, not a wake-up from each writer: the triggers see
every write path, a hook would have to be put in each; an empty read is
one indexed lookup on the reader connection (docs/hub.md has the figure),
never the writer's lock. Each change is rendered once (its row's current
view as an SSE event) and the same bytes go to every stream that wants it.

A stream's buffer is bounded. A client that does not read fills it and is
cut off: its connection is aborted (or, on a server that offers no abort,
its response cancelled), so a slow consumer never slows the reader or the
hub; it reconnects with ``Last-Event-ID`` and misses nothing the table
still holds.

A stream starts with ``live_from``, the reader's position when it joined:
the reader hands it every change above that id, and the stream reads what
it asked for up to that id itself (``events.py``). Both meet without a gap
or an overlap because a stream joins only between two batches (a lock): a
batch is read, rendered, offered and the position moved past it, all
before or all after the stream's registration.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import msgspec

from runtime import Flag

from ..._errors import HubShuttingDown, TooManyStreams
from ...store import Change, DeploymentView, Store, change_views, feed_start, read_feed

log = logging.getLogger("mailrun.hub.events")

DeploymentExtra = Callable[[str], Mapping[str, Any]]


@dataclass(frozen=True)
class EventLimits:
    max_streams: int = 100
    """Streams open at once; past it, 503 ``too_many_streams``."""
    buffer: int = 1_000
    """Events queued for one client; when they fill, it is cut off."""
    batch: int = 500
    """Changes read per query."""
    poll_interval: float = 0.15
    """Seconds between reads of the change table while a stream is open."""
    keep_alive: float = 15.0
    """Seconds of silence before a ``: ping`` comment."""

    def __post_init__(self) -> None:
        # A batch is offered to a stream at once: a buffer smaller than one
        # would cut off a client that keeps up perfectly well.
        if self.buffer < 2 * self.batch:
            raise ValueError(f"an event buffer ({self.buffer}) holds two batches ({self.batch})")


@dataclass(frozen=True, slots=True)
class Frame:
    id: int
    data: bytes  # the whole SSE event


def sse_event(change: Change, view: dict[str, object]) -> Frame:
    """One change as an SSE event: its id, its kind, the row's view with the
    status this change recorded (``change``)."""
    body = {**view, "change": {"status": change.status, "at": change.at}}
    data = msgspec.json.encode(body)  # compact: no newline, one data line
    head = b"id: %d\nevent: %s\n" % (change.id, change.kind.encode())
    return Frame(change.id, b"%sdata: %s\n\n" % (head, data))


class Follower:
    """One open stream: a bounded buffer the reader fills, and the means to end it."""

    def __init__(self, feed: ChangeFeed, deployment_id: str | None, live_from: int) -> None:
        self.feed = feed
        self.deployment_id = deployment_id
        self.live_from = live_from
        self._send, self.frames = anyio.create_memory_object_stream[Frame](feed.limits.buffer)
        self.scope = anyio.CancelScope()
        self.abort: Callable[[], object] | None = None  # the server's, when it offers one

    def wants(self, change: Change) -> bool:
        return self.deployment_id is None or change.deployment_id == self.deployment_id

    def offer(self, frame: Frame) -> bool:
        """Queue ``frame``; False when the buffer is full (or closed)."""
        try:
            self._send.send_nowait(frame)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return True

    def end(self) -> None:
        """No more frames: the stream sends what it holds and finishes."""
        self._send.close()

    def discard(self) -> None:
        """The stream is over: what it still holds goes."""
        self._send.close()
        self.frames.close()

    def cut_off(self) -> None:
        """End the stream now, whatever it holds: its client is not reading."""
        self._send.close()
        if self.abort is not None:
            self.abort()  # the blocked send returns at once: the connection is gone
        else:
            self.scope.cancel()


class ChangeFeed:
    """The shared reader. Run :meth:`run` in a task group; :meth:`close`
    ends every stream (the hub is stopping)."""

    def __init__(
        self,
        store: Store,
        limits: EventLimits | None = None,
        *,
        deployment_extra: DeploymentExtra | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or EventLimits()
        self._extra = deployment_extra
        self._streams: set[Follower] = set()
        self._open = Flag()
        self._position = 0
        self._parked = False  # the reader waits for a first stream, having read nothing since
        self._running = False
        self._closed = False
        self._batch_lock = anyio.Lock()
        self.cut_off_total = 0

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._position = await feed_start(self.store)
        self._running = True
        task_status.started()
        try:
            while True:
                if not self._streams:
                    self._parked = True
                    await self._open.wait()
                    self._parked = False
                try:
                    while await self._read_once():
                        pass  # a full batch: more may be waiting
                except Exception:
                    log.exception("cannot read the change feed")
                await anyio.sleep(self.limits.poll_interval)
        finally:
            self.close()

    async def subscribe(self, deployment_id: str | None) -> Follower:
        if self._closed or not self._running:
            raise HubShuttingDown("the hub is not streaming events")
        if len(self._streams) >= self.limits.max_streams:
            raise TooManyStreams(
                f"{self.limits.max_streams} event streams are open; try again later"
            )
        async with self._batch_lock:
            newest = await feed_start(self.store)
            if self._closed:
                raise HubShuttingDown("the hub is stopping")
            if self._parked:
                # Nobody needed the changes since the reader parked: it
                # starts at the newest instead of reading them for nothing.
                self._position = max(self._position, newest)
            sub = Follower(self, deployment_id, self._position)
            self._streams.add(sub)
            self._open.set()
            return sub

    def unsubscribe(self, sub: Follower) -> None:
        sub.discard()
        self._streams.discard(sub)
        if not self._streams:
            self._open.clear()

    def close(self) -> None:
        """End every stream and take no new one."""
        self._closed = True
        for sub in list(self._streams):
            sub.end()

    async def render(self, changes: list[Change]) -> list[Frame]:
        views = await change_views(self.store, changes, live=self._live)
        return [sse_event(change, view) for change, view in views]

    def _live(self, view: DeploymentView) -> DeploymentView:
        """A deployment as ``GET`` shows it: with the wire side's live view."""
        if self._extra is None:
            return view
        return msgspec.structs.replace(view, **self._extra(view.id))

    async def _read_once(self) -> bool:
        """Read, render and offer one batch; whether it was a full one."""
        async with self._batch_lock:
            closed, after, batch = self._closed, self._position, self.limits.batch
            changes, full = ([], False) if closed else await read_feed(self.store, after, batch)
            if not changes:
                return False
            streams = list(self._streams)
            wanted = [c for c in changes if any(s.wants(c) for s in streams)]
            frames = await self.render(wanted) if wanted else []
            for sub in streams:
                if sub not in self._streams:
                    continue  # it ended meanwhile
                for change, frame in zip(wanted, frames, strict=True):
                    if sub.wants(change) and not sub.offer(frame):
                        self._cut_off(sub)
                        break
            self._position = changes[-1].id
            return full

    def _cut_off(self, sub: Follower) -> None:
        self.cut_off_total += 1
        log.info("event stream cut off: its client read too slowly (%d queued)", self.limits.buffer)
        sub.cut_off()
        self.unsubscribe(sub)

    def metrics(self) -> str:
        """``GET /metrics``'s event stream family (Prometheus text)."""
        cut = "mailrun_event_streams_cut_off_total"
        return (
            "# HELP mailrun_event_streams Open GET /events streams.\n"
            f"# TYPE mailrun_event_streams gauge\nmailrun_event_streams {len(self._streams)}\n"
            f"# HELP {cut} Streams ended because their client read too slowly.\n"
            f"# TYPE {cut} counter\n{cut} {self.cut_off_total}\n"
        )
