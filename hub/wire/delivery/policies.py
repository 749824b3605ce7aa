"""Policy changes: a deployment's new failure policy sent to its sidecar.

Every Welcome carries the policy (``hub.wire.sessions``), so only a change
made while a session is open needs sending: ``SetPolicy`` on the sidecar's
inbound subject, stamped with the session it is for, answered by
``PolicySet``. The driver remembers which session is owed the policy and
asks again every ``interval`` until the answer comes, or until that session
is no longer the deployment's current one (a new hello got the policy in
its Welcome). It sends the policy as the store has it when it sends, so two
quick changes cost at most one frame more. One task sends, one deployment
after the other: changes are rare and each answer is small.
"""

from __future__ import annotations

import logging
from functools import partial

from runtime import Ack, FrameDecoder, Reason, Subjects, Transport, Wakeup
from runtime.wire import PolicySet, SetPolicy

from ...store import Store, read_policy
from ..sessions import SessionTable
from .asking import ask_sidecar

log = logging.getLogger("mailrun.hub.policy")

POLICY_TIMEOUT = 5.0
"""How long one SetPolicy waits for its PolicySet before the driver moves on
(and asks again at its next round): ``WireConfig.policy_timeout``."""

_replies: FrameDecoder[PolicySet | Ack] = FrameDecoder(PolicySet | Ack)


class PolicyDriver:
    """Sends changed policies to the sessions that were open when they changed."""

    def __init__(
        self,
        *,
        store: Store,
        transport: Transport,
        subjects: Subjects,
        sessions: SessionTable,
        interval: float = 1.0,
        timeout: float = POLICY_TIMEOUT,
    ) -> None:
        self._store = store
        self._transport = transport
        self._subjects = subjects
        self._sessions = sessions
        self._interval = interval
        self._timeout = timeout
        self._wake = Wakeup()
        self._changes = 0
        self._owed: dict[str, tuple[str, int]] = {}
        """Deployment id -> the session owed its policy, and the change's number
        (a change made while one is being sent is sent again)."""

    def changed(self, deployment_id: str) -> None:
        """The deployment's policy changed (committed): tell its sidecar."""
        session = self._sessions.current(deployment_id)
        if session is None:
            # No sidecar here: its next hello gets the policy in its Welcome.
            self._owed.pop(deployment_id, None)
            return
        self._changes += 1
        self._owed[deployment_id] = (session.session_id, self._changes)
        self._wake.set()

    def owed(self, deployment_id: str) -> str | None:
        """The session still owed the deployment's policy, if any."""
        owed = self._owed.get(deployment_id)
        return owed[0] if owed is not None else None

    async def run(self) -> None:
        while True:
            await self._wake.wait(self._interval)
            for deployment_id, owed in list(self._owed.items()):
                try:
                    await self._send(deployment_id, *owed)
                except Exception:
                    log.exception("cannot send the policy of %s", deployment_id)

    async def _send(self, deployment_id: str, session_id: str, change: int) -> None:
        current = self._sessions.current(deployment_id)
        if current is None or current.session_id != session_id:
            self._settle(deployment_id, change)  # a new hello got it in its Welcome
            return
        policy = await self._store.read(partial(read_policy, deployment_id=deployment_id))
        frame = SetPolicy(session_id=session_id, policy=policy)
        reply = await ask_sidecar(
            self._transport, self._subjects, deployment_id, frame, _replies, self._timeout, "policy"
        )
        if reply is None:
            return
        if isinstance(reply, Ack):
            if reply.reason == Reason.DECODE_ERROR:
                # An older sidecar knows no policy: it keeps failing runs as it did.
                log.warning("the sidecar of %s cannot take a failure policy", deployment_id)
                self._settle(deployment_id, change)
            return
        if reply.deployment_id in ("", deployment_id):
            log.info("deployment %s: policy %s in force", deployment_id, policy)
            self._settle(deployment_id, change)

    def _settle(self, deployment_id: str, change: int) -> None:
        owed = self._owed.get(deployment_id)
        if owed is not None and owed[1] == change:
            del self._owed[deployment_id]
