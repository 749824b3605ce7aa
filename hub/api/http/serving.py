"""What the connections of one server share (``Serving``): the app, the
limits, the task group that owns every answer and the workers that run them
in it, who is connected, and the drain that a stop starts."""

from __future__ import annotations

from typing import Protocol

import anyio
import anyio.abc

from runtime.loops import Workers

from .cycle import App
from .fast import FastPath
from .limits import HttpLimits

KEEP = 64
"""Answering tasks at most kept waiting for the next request: as many as a
busy client pool keeps in flight, so that a flood spawns none either."""


class Member(Protocol):
    """A connection, as the server sees it (``protocol.Connection``)."""

    def shutdown(self) -> None:
        """Close now if idle, else after the answer under way."""
        ...


class Serving:
    """What the connections of one server share: the app, the limits, the
    task group that owns every answer, and who is connected."""

    def __init__(
        self,
        app: App,
        limits: HttpLimits,
        fast_path: FastPath | None,
        answers: anyio.abc.TaskGroup,
    ) -> None:
        self.app = app
        self.limits = limits
        self.fast_path = fast_path
        self.answers = answers
        # Tasks of ``answers`` kept for the next request: a task spawned per
        # request was a lone mail's largest single cost here.
        self.workers = Workers(answers, keep=KEEP)
        self.connections: set[Member] = set()
        self.in_flight = 0  # answers under way
        self.draining = False
        self.emptied = anyio.Event()  # set once draining and no connection is left

    def full(self) -> bool:
        limit = self.limits.max_connections
        return len(self.connections) > limit or self.in_flight >= limit

    def drain(self) -> None:
        """Take no new request: each connection closes after its answer."""
        self.draining = True
        for conn in list(self.connections):
            conn.shutdown()
        self._check_empty()

    def gone(self, conn: Member) -> None:
        self.connections.discard(conn)
        self._check_empty()

    def _check_empty(self) -> None:
        if self.draining and not self.connections:
            self.emptied.set()
