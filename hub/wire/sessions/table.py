"""Sidecar sessions in the hub's memory: by id, the current one of each
deployment, which are asleep, and the fence every write for a sidecar is
made under.

A session is hub memory only; a restarted hub knows none and sidecars
re-hello on ``HubBoot``. The durable half of ownership is the deployment
row (``owner_instance``, ``owner_epoch``), claimed in one conditional
UPDATE (the store's ``commit_claim``, hub/wire/sessions/hello.py), so the
table can always be rebuilt from fresh hellos. Every write for a sidecar
is made under a :class:`~hub.store.Fence` (:meth:`SessionTable.fence`),
checked in the write's own transaction.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from runtime import new_id

from ..._errors import StaleEpoch, UnknownSession
from ...store import Fence
from .leasing import Everything, Leases

MAX_SESSIONS = 10_000


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    deployment_id: str
    instance_id: str
    owner_epoch: int
    opened_at: float
    bound: bool = False
    """Its hello came on the deployment's own subject (a sidecar of this
    release): every request under it must too. An unbound session is a
    sidecar of an earlier release, on the shared subjects."""
    batches: bool = False
    """Its sidecar takes MailBatch frames (format 3 in its hello)."""
    challenged: float = 0.0
    """When its hello's Challenge was issued (``time.monotonic()``): of two
    hellos of one instance, the later one asked for its Challenge later."""


class SessionTable:
    """Sessions by id (bounded, oldest forgotten first) and the current one per
    deployment. A frame is valid when it names a known session of its
    deployment and carries the epoch of that deployment's current session."""

    def __init__(self, *, max_sessions: int = MAX_SESSIONS, leases: Leases | None = None) -> None:
        self.leases: Leases = leases or Everything()
        """Which deployments this hub serves (several hubs: by lease)."""
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._current: dict[str, Session] = {}
        self._seen: dict[str, float] = {}  # deployment id -> monotonic time
        self._asleep: dict[str, str] = {}  # deployment id -> the session whose Sleep was granted
        self._max = max_sessions

    def open(
        self,
        deployment_id: str,
        instance_id: str,
        owner_epoch: int,
        *,
        bound: bool = False,
        batches: bool = False,
        challenged: float = 0.0,
    ) -> Session:
        session = Session(
            new_id("ses"),
            deployment_id,
            instance_id,
            owner_epoch,
            time.time(),
            bound,
            batches,
            challenged,
        )
        self._by_id[session.session_id] = session
        while len(self._by_id) > self._max:
            self._by_id.popitem(last=False)
        current = self._current.get(deployment_id)
        # Claims commit in epoch order but their hello handlers may resume in
        # any order: never let a late older claim displace a newer owner. At
        # one epoch (one instance) the later hello wins: a hello welcomed from
        # a read may overtake an earlier one of the same sidecar whose claim
        # waited for the writer, and whose answer came after the sidecar had
        # given up on it.
        if (
            current is None
            or current.owner_epoch < owner_epoch
            or (current.owner_epoch == owner_epoch and current.challenged <= challenged)
        ):
            self._current[deployment_id] = session
            self._asleep.pop(deployment_id, None)
            self.seen(deployment_id)
        return session

    def current(self, deployment_id: str) -> Session | None:
        return self._current.get(deployment_id)

    def drop(self, deployment_id: str) -> None:
        """Forget a deployment (it was deleted): its frames name no session now."""
        self._current.pop(deployment_id, None)
        self._seen.pop(deployment_id, None)
        self._asleep.pop(deployment_id, None)
        for session_id in [k for k, s in self._by_id.items() if s.deployment_id == deployment_id]:
            del self._by_id[session_id]

    def fall_asleep(self, session: Session) -> bool:
        """The session's Sleep was granted: it ends (nothing is delivered to
        it, it is neither probed nor shown) and is remembered as the one that
        fell asleep, until the deployment's next Welcome. False when it was
        no longer the deployment's current session (a newer hello won)."""
        dep = session.deployment_id
        if self._current.get(dep) is not session:
            return False
        del self._current[dep]
        self._seen.pop(dep, None)
        self._asleep[dep] = session.session_id
        return True

    def asleep(
        self, session_id: str, deployment_id: str, owner_epoch: int, *, sender: str | None
    ) -> bool:
        """Whether a frame names the session whose Sleep was granted, still
        asleep (no Welcome since): a repeated Sleep is answered Asleep again."""
        session = self._by_id.get(session_id)
        return (
            session is not None
            and self._asleep.get(session.deployment_id) == session_id
            and deployment_id in ("", session.deployment_id)
            and owner_epoch == session.owner_epoch
            and (sender == session.deployment_id if sender is not None else not session.bound)
        )

    def all_current(self) -> list[Session]:
        """The current session of every deployment, answering or not."""
        return list(self._current.values())

    def seen(self, deployment_id: str) -> None:
        """The deployment's sidecar just completed an exchange with the hub.

        NATS request/reply has no disconnect signal: a sidecar counts as
        connected only while such exchanges keep coming (see ``hub.wire.delivery.health``).
        """
        if deployment_id in self._current:
            self._seen[deployment_id] = time.monotonic()

    def silence(self, deployment_id: str) -> float | None:
        """Seconds since the current session's last exchange; None without one."""
        last = self._seen.get(deployment_id)
        return None if last is None else max(0.0, time.monotonic() - last)

    def check(
        self,
        session_id: str,
        deployment_id: str = "",
        owner_epoch: int | None = None,
        *,
        sender: str | None,
    ) -> Session:
        """The session a frame names, or :class:`UnknownSession` / :class:`StaleEpoch`.

        ``sender`` is the deployment whose identity sent the frame, as the
        subject it came on proves (None: a shared subject). A session id is
        not a credential: the session must be the sender's, and a bound
        session is valid only on its deployment's own subjects.

        An older session of the current owner (same instance, same epoch, from
        an earlier hello) stays valid: frames it sent before re-helloing are
        still the owner's frames.
        """
        session = self._by_id.get(session_id)
        if (
            session is None
            or (deployment_id and deployment_id != session.deployment_id)
            or (sender is None and session.bound)
            or (sender is not None and sender != session.deployment_id)
        ):
            raise UnknownSession(f"no session {session_id!r} for this deployment")
        current = self._current.get(session.deployment_id)
        epoch = session.owner_epoch if owner_epoch is None else owner_epoch
        if current is None or epoch != session.owner_epoch or epoch != current.owner_epoch:
            raise StaleEpoch(f"epoch {epoch} is not the current owner's")
        self.seen(session.deployment_id)
        return session

    def fence(self, deployment_id: str, owner_epoch: int) -> Fence:
        """What a write for the deployment under ``owner_epoch`` is made
        under: its transaction raises :class:`StaleEpoch` unless that is
        the deployment row's current epoch, and ``LeaseLost`` unless this
        hub still serves the deployment."""
        return Fence(deployment_id, owner_epoch, self.leases.lease(deployment_id))
