"""Sidecar sessions: the challenge/hello handshake and the ownership claim.

A session is hub memory only; a restarted hub knows none and sidecars
re-hello on ``HubBoot``. The durable half of ownership is the deployment
row (``owner_instance``, ``owner_epoch``), claimed in one conditional
UPDATE (the store's ``commit_claim``), so the memory table can always be
rebuilt from fresh hellos. Every write for a sidecar is made under a
:class:`~hub.store.Fence` (:meth:`SessionTable.fence`), checked in the
write's own transaction. A Welcome carries the deployment's failure policy,
read in the claim's transaction, and that transaction deletes the
deployment's sleep row: the sidecar is awake, wherever it runs.

What a join costs the hub (every wake of an asleep deployment is one): the
deployment's row is read once, for the Challenge, and kept with its nonce;
the signed hello is checked against that row's key, and the claim's
transaction reads the row again and decides on it. The claim is a write
transaction of its own, never in the wire's group commit: it decides on
whether the owner is alive as this hub's sessions show it, and a claim
sharing its batch would open its session only after their common COMMIT
(two copies of a state dir would both be welcomed). The owner itself saying hello
again (its answer came after its timeout, a reconnect, a hub's restart)
holds the claim already: when the row still says so and the deployment is
awake, its Welcome is made from a read, with nothing written.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from runtime import (
    Challenge,
    FrameDecoder,
    Hello,
    Reason,
    Refused,
    SignatureError,
    Welcome,
    afailpoint,
    hello_message,
    new_id,
)
from runtime.wire import BATCH_FORMAT, FailurePolicy, verify

from ..._errors import StaleEpoch, UnknownSession
from ...store import (
    Fence,
    Store,
    Tx,
    commit_claim,
    floor_seq,
    is_asleep,
    read_owner,
    read_policy,
    wake_deployment,
)
from .leasing import Everything, Leases
from .nonces import NONCE_TTL, Nonces
from .ownership import OWNER_LEASE, OwnerClaim, decide, home_of, not_live

log = logging.getLogger("mailrun.hub.sessions")

_ANY_OWNER = "*"  # just after a restart: whoever is recorded may still be running

MAX_SESSIONS = 10_000

_Claimed = tuple[OwnerClaim, int, FailurePolicy, bool]
"""A claim made: its epoch, the floor, the policy, whether it woke the deployment."""


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


class HelloHandler:
    """Answers ``hub.hello``: Challenge, then Welcome or Refused (see
    :mod:`hub.wire.sessions.ownership` for who is welcomed)."""

    def __init__(
        self,
        *,
        store: Store,
        sessions: SessionTable,
        boot_id: str,
        on_welcome: Callable[[Session], None],
        on_moved: Callable[[str, int], None] = lambda dep, epoch: None,
        nonce_ttl: float = NONCE_TTL,
        owner_lease: float = OWNER_LEASE,
    ) -> None:
        self._store = store
        self._sessions = sessions
        self._boot_id = boot_id
        self._on_welcome = on_welcome
        self._on_moved = on_moved
        self._nonces = Nonces(ttl=nonce_ttl)
        self._lease = owner_lease
        self._booted = time.monotonic()
        self._decoder: FrameDecoder[Hello] = FrameDecoder(Hello)

    async def __call__(self, data: bytes, sender: str | None) -> Challenge | Welcome | Refused:
        hello = self._decoder.decode(data)
        if sender is not None and sender != hello.deployment_id:
            return Refused(
                reason=Reason.WRONG_DEPLOYMENT,
                detail=f"a hello for {hello.deployment_id} on {sender}'s subject",
            )
        if hello.nonce is None:
            row = await self._store.read(partial(read_owner, deployment_id=hello.deployment_id))
            if (refused := not_live(row, hello.deployment_id)) is not None:
                return refused
            assert row is not None
            return Challenge(nonce=self._nonces.issue(hello.deployment_id, row))
        # The row as the Challenge read it: the key never changes, and the
        # claim's transaction reads the row again before it decides.
        taken = self._nonces.take_issued(hello.nonce, hello.deployment_id)
        if taken is None:
            return Refused(reason=Reason.BAD_NONCE, detail="unknown, used or expired nonce")
        row, challenged = taken
        if not hello.instance_id or hello.public_key != row.public_key:
            return Refused(reason=Reason.BAD_SIGNATURE, detail="not this deployment's key")
        try:
            message = hello_message(hello.nonce, hello.deployment_id, hello.instance_id)
            verify(row.public_key, message, hello.signature or b"")
        except SignatureError as exc:
            return Refused(reason=Reason.BAD_SIGNATURE, detail=str(exc))
        # Verified, not claimed: a deletion or another claim may commit here.
        await afailpoint("hub.hello.before_claim")
        claimed: _Claimed | Refused | None = None
        if row.owner_instance == hello.instance_id:
            claimed = await self._store.read(partial(_held, hello=hello))
        if claimed is None:
            # Its own transaction, never a group's: the claim decides on the
            # owner's liveness as this hub sees it, which another claim of the
            # same batch would change only once its session opens, after COMMIT.
            claimed = await self._store.transact(self._claim_body(hello, row.public_key))
        if isinstance(claimed, Refused):
            return claimed
        return self._welcome(hello, claimed, bound=sender is not None, challenged=challenged)

    def _live_owner(self, deployment_id: str) -> str | None:
        """The instance that may still be running as the owner, if any (a
        snapshot for the claim's transaction, which runs off the loop). A
        restarted hub knows no session: it gives every owner one lease to say
        hello again."""
        current = self._sessions.current(deployment_id)
        silence = self._sessions.silence(deployment_id)
        if current is not None and silence is not None and silence < self._lease:
            return current.instance_id
        if time.monotonic() - self._booted < self._lease:
            return _ANY_OWNER
        return None

    def _claim_body(self, hello: Hello, key: str) -> Callable[[Tx], _Claimed | Refused]:
        dep = hello.deployment_id
        live_owner = self._live_owner(dep)

        # The decision is made on the row as the claim's own transaction
        # reads it: nothing commits between the read and the claim.
        def body(tx: Tx) -> _Claimed | Refused:
            row = read_owner(tx, dep)
            if (refused := not_live(row, dep)) is not None:
                return refused
            assert row is not None
            if row.public_key != key:
                return Refused(reason=Reason.BAD_SIGNATURE, detail="not this deployment's key")
            owner = row.owner_instance
            owner_live = owner is not None and live_owner in (_ANY_OWNER, owner)
            unconfirmed = live_owner == _ANY_OWNER
            claim = decide(row, hello, owner_live=owner_live, unconfirmed=unconfirmed)
            if isinstance(claim, Refused):
                return claim
            if not commit_claim(tx, dep, row, hello.instance_id, home_of(hello), claim.owner_epoch):
                return Refused(reason=Reason.OWNER_CONFLICT, detail="ownership moved meanwhile")
            woke = wake_deployment(tx, dep)
            return claim, floor_seq(tx, dep), read_policy(tx, dep), woke

        return body

    def _welcome(
        self, hello: Hello, claimed: _Claimed, *, bound: bool, challenged: float
    ) -> Welcome:
        claim, floor, policy, woke = claimed
        dep = hello.deployment_id
        session = self._sessions.open(
            dep,
            hello.instance_id,
            claim.owner_epoch,
            bound=bound,
            batches=BATCH_FORMAT in hello.formats,
            challenged=challenged,
        )
        log.info(
            "welcome %s instance %s epoch %d session %s%s%s",
            dep,
            hello.instance_id,
            claim.owner_epoch,
            session.session_id,
            " (from the hub's state)" if claim.from_hub else "",
            ": it wakes up" if woke else "",
        )
        if claim.moved:
            self._on_moved(dep, claim.owner_epoch)
        self._on_welcome(session)
        return Welcome(
            session_id=session.session_id,
            owner_epoch=claim.owner_epoch,
            hub_boot_id=self._boot_id,
            floor_seq=floor,
            from_hub=claim.from_hub,
            policy=policy,
        )


def _held(tx: Tx, hello: Hello) -> _Claimed | Refused | None:
    """On the reader: the Welcome of an owner saying hello again, which holds
    the claim already (the same instance, awake: nothing to write); None
    when the claim must be made in a write transaction (the row moved on,
    or the deployment is asleep and its sleep row must go)."""
    dep = hello.deployment_id
    row = read_owner(tx, dep)
    if (refused := not_live(row, dep)) is not None:
        return refused
    assert row is not None
    if row.owner_instance != hello.instance_id or is_asleep(tx, dep):
        return None
    claim = OwnerClaim(int(row.owner_epoch), from_hub=False, moved=False)
    return claim, floor_seq(tx, dep), read_policy(tx, dep), False
