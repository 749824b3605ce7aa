"""A sidecar's Sleep (``hub.sleep``): granted with Asleep, or refused ``busy``.

The sidecar asks once it has had nothing to do for its idle time and takes
no more deliveries. The request is checked like every other one (the
subject's deployment, the frame's, the session and the owner epoch), then
granted in one write transaction under the session's fence
(``hub.store.grant_sleep``): the deployment's sleep row is written unless a
dispatch waits for delivery or a version waits to be loaded, which answer
``Refused(busy)`` (the sidecar takes deliveries again). The transaction is
made through ``writes``, the wire's group commit: Sleeps and
events frames that wait at the same moment share one commit. Once granted, the
session ends in memory (``on_asleep``): nothing more is delivered to it,
and it is neither probed nor shown as a silent sidecar. A Sleep repeated by
the same session (its answer was lost) is answered Asleep again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Protocol, TypeVar

from runtime import Asleep, FrameDecoder, Reason, Refused, Sleep

from ...store import Store, Tx, grant_sleep
from ..sessions import Session, SessionTable

log = logging.getLogger("mailrun.hub.sleep")

T = TypeVar("T")


class Writes(Protocol):
    """Where a write transaction's body is committed: the store itself, or a
    group commit in front of it (``hub.wire.events.GroupCommit``)."""

    async def transact(self, body: Callable[[Tx], T]) -> T: ...


class SleepHandler:
    """Answers ``hub.sleep`` with Asleep or Refused."""

    def __init__(
        self,
        *,
        store: Store,
        sessions: SessionTable,
        on_asleep: Callable[[Session], None] = lambda session: None,
        writes: Writes | None = None,
    ) -> None:
        self._writes: Writes = writes or store
        self._sessions = sessions
        self._on_asleep = on_asleep
        self._decoder: FrameDecoder[Sleep] = FrameDecoder(Sleep)

    async def __call__(self, data: bytes, sender: str | None) -> Asleep | Refused:
        req = self._decoder.decode(data)
        sessions = self._sessions
        if sessions.asleep(req.session_id, req.deployment_id, req.owner_epoch, sender=sender):
            return Asleep(deployment_id=req.deployment_id or sender or "")
        session = sessions.check(req.session_id, req.deployment_id, req.owner_epoch, sender=sender)
        dep = session.deployment_id
        busy = await self._writes.transact(
            partial(grant_sleep, fence=sessions.fence(dep, req.owner_epoch))
        )
        if busy is not None:
            return Refused(reason=Reason.BUSY, detail=busy)
        if sessions.fall_asleep(session):
            log.info("%s is asleep (session %s)", dep, session.session_id)
            self._on_asleep(session)
        return Asleep(deployment_id=dep)
