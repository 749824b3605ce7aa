"""Fenced notices to sidecars: a synchronous caller (a claim just committed,
a deletion) queues one, and one task publishes them."""

from __future__ import annotations

import logging

import anyio

from runtime import Fenced, Reason, Subjects, Transport, TransportError, encode

log = logging.getLogger("mailrun.hub.wire")


class Notices:
    """Fenced notices to sidecars, published from one task.

    Callers are synchronous (a claim just committed, a deletion); a notice is
    a hint that makes a fenced process find out at once instead of at its
    next exchange, so a full queue drops one rather than block the caller."""

    def __init__(self, transport: Transport, subjects: Subjects, size: int = 256) -> None:
        self._transport = transport
        self._subjects = subjects
        self._send, self._receive = anyio.create_memory_object_stream[Fenced](size)

    def fenced(self, deployment_id: str, owner_epoch: int, reason: Reason) -> None:
        notice = Fenced(deployment_id=deployment_id, owner_epoch=owner_epoch, reason=reason)
        try:
            self._send.send_nowait(notice)
        except anyio.WouldBlock:
            log.warning("fenced notice for %s dropped: too many queued", deployment_id)

    async def run(self) -> None:
        # Both ends close with this task: nothing queues once the wire stops.
        with self._send, self._receive:
            async for notice in self._receive:
                subject = self._subjects.inbound(notice.deployment_id)
                try:
                    await self._transport.publish(subject, encode(notice))
                except TransportError as exc:
                    log.warning("cannot tell %s it is fenced: %s", notice.deployment_id, exc)
