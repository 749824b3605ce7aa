"""Control frames: what the hub says on the inbound subject besides mail.

``Ping`` (a liveness probe), ``Fenced`` (the deployment was deleted, or
ownership moved), ``LoadVersion`` (fetch, keep and import a version
before the hub makes it active) and ``SetPolicy`` (the deployment's failure
policy changed; answered ``PolicySet`` once it is in force and kept) come
on the deployment's inbound subject,
in between its mail frames. They are handled by a task of their own, fed
by a bounded mailbox, so a rollout (a blob fetch, then an import of user
code) never holds the deployment's mail: delivery hands a control frame
over and goes on. A frame that finds the mailbox full is dropped, as a
frame lost on the way would be: a Ping unanswered is silence, and the hub
sends a LoadVersion again at its next look.

Each is answered only under a session this process holds (the hub stamps
the ones it sends), so a fenced process that has not stopped yet never
keeps the deployment looking alive, nor loads code for it. A LoadVersion
is work that keeps the sidecar awake; one that comes while it asks to
sleep is left unanswered (the hub sends it again, to whichever process).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from runtime import (
    Fenced,
    LoadVersion,
    Message,
    Ping,
    Pong,
    Reason,
    TransportError,
    VersionLoaded,
    encode,
)
from runtime.wire import FailurePolicy, PolicySet, SetPolicy

from ..execution import Versions
from ._session import HubLink

log = logging.getLogger("mailrun.sidecar.control")

ControlFrame = Ping | Fenced | LoadVersion | SetPolicy
CONTROL_FRAMES = (Ping, Fenced, LoadVersion, SetPolicy)

MAILBOX = 16
"""Control frames waiting for the control task (the hub has one probe and
one rollout in flight per deployment at most)."""


class Control:
    """The control task (:meth:`run`) and its mailbox (:meth:`offer`)."""

    def __init__(
        self,
        *,
        link: HubLink,
        deployment_id: str,
        versions: Versions | None = None,
        set_policy: Callable[[FailurePolicy], Awaitable[None]] | None = None,
    ) -> None:
        self._link = link
        self._deployment_id = deployment_id
        self._versions = versions
        self._set_policy = set_policy
        self._send: MemoryObjectSendStream[tuple[Message, ControlFrame]]
        self._receive: MemoryObjectReceiveStream[tuple[Message, ControlFrame]]
        self._send, self._receive = anyio.create_memory_object_stream[tuple[Message, ControlFrame]](
            MAILBOX
        )

    def offer(self, message: Message, frame: ControlFrame) -> None:
        """Hand ``frame`` to the control task without waiting for it."""
        try:
            self._send.send_nowait((message, frame))
        except anyio.WouldBlock:
            log.warning("control frames pile up: dropping a %s", type(frame).__name__)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the control task has ended: the sidecar is stopping

    def close(self) -> None:
        """The mailbox goes, whether or not :meth:`run` ever started."""
        self._send.close()
        self._receive.close()

    async def run(self) -> None:
        with self._send, self._receive:
            async for message, frame in self._receive:
                match frame:
                    case Ping():
                        await self._pong(message, frame)
                    case Fenced():
                        self._fenced(frame)
                    case LoadVersion():
                        await self._load(message, frame)
                    case SetPolicy():
                        await self._policy(message, frame)

    async def _pong(self, message: Message, ping: Ping) -> None:
        # Only the session the hub probes answers: a fenced process that has
        # not stopped yet must not keep the deployment looking alive.
        if not self._link.holds(ping.session_id):
            return
        with contextlib.suppress(TransportError):  # a lost Pong is just silence
            await message.respond(encode(Pong(deployment_id=self._deployment_id)))

    def _fenced(self, notice: Fenced) -> None:
        """The hub says the deployment was deleted or moved: a hello, whose
        answer is the proof, decides whether this process stops."""
        session = self._link.session
        moved_on = session is None or notice.owner_epoch > session.owner_epoch
        if notice.deployment_id == self._deployment_id and (
            notice.reason == Reason.DEPLOYMENT_NOT_LIVE or moved_on
        ):
            log.info("hub says %s (epoch %d): saying hello", notice.reason, notice.owner_epoch)
            if notice.reason == Reason.DEPLOYMENT_NOT_LIVE:
                self._link.told_gone = True
            self._link.rehello()

    async def _load(self, message: Message, frame: LoadVersion) -> None:
        """Load a version the hub is about to make active, and say how it went.
        Only the session the hub stamped answers (as for a Ping)."""
        if not self._link.holds(frame.session_id) or self._versions is None:
            return
        activity = self._link.activity
        if not activity.taking:
            return
        with activity.busy():
            error = await self._versions.load(frame.version, frame.code, self._link.fetch_blob)
        reply = VersionLoaded(deployment_id=self._deployment_id, version=frame.version, error=error)
        try:
            await message.respond(encode(reply))
        except TransportError as exc:
            log.warning("could not answer the load of version %d: %s", frame.version, exc)

    async def _policy(self, message: Message, frame: SetPolicy) -> None:
        """Put the deployment's new failure policy in force, and say so. Only
        the session the hub stamped answers (as for a Ping); the hub sends
        it again until it hears back, and a new Welcome carries it anyway."""
        if not self._link.holds(frame.session_id) or self._set_policy is None:
            return
        await self._set_policy(frame.policy)
        with contextlib.suppress(TransportError):  # unanswered: the hub sends it again
            await message.respond(encode(PolicySet(deployment_id=self._deployment_id)))
