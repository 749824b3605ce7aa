"""A sidecar's hello (``hub.hello``): the Challenge, the signed hello, and
the ownership claim it makes; answered with Welcome or Refused.

A Welcome carries the deployment's failure policy, read in the claim's
transaction, and that transaction deletes the deployment's sleep row: the
sidecar is awake, wherever it runs.

What a join costs the hub (every wake of an asleep deployment is one): the
deployment's row is read once, for the Challenge, and kept with its nonce;
the signed hello is checked against that row's key, and the claim's
transaction reads the row again and decides on it. The claim is a write
transaction of its own, never in the wire's group commit: it decides on
whether the owner is alive as this hub's sessions show it, and a claim
sharing its batch would open its session only after their common COMMIT
(two copies of a state dir would both be welcomed). For the same reason the
claims of one deployment are made one at a time, each from its snapshot of
the owner's liveness to its session opened: a claim whose snapshot was taken
while another's transaction was in flight would find that new owner not
live, and a copy would be welcomed over a takeover (``OneAtATime``). The
owner itself saying hello again (its answer came after its timeout, a
reconnect, a hub's restart) holds the claim already: when the row still says
so and the deployment is awake, its Welcome is made from a read, with
nothing written and no claim to wait for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
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
)
from runtime.wire import BATCH_FORMAT, FailurePolicy, verify

from ...store import (
    Store,
    Tx,
    commit_claim,
    floor_seq,
    is_asleep,
    read_owner,
    read_policy,
    wake_deployment,
)
from .nonces import NONCE_TTL, Nonces
from .ownership import OWNER_LEASE, OneAtATime, OwnerClaim, decide, home_of, not_live
from .table import Session, SessionTable

log = logging.getLogger("mailrun.hub.sessions")

_ANY_OWNER = "*"  # just after a restart: whoever is recorded may still be running

_Claimed = tuple[OwnerClaim, int, FailurePolicy, bool]
"""A claim made: its epoch, the floor, the policy, whether it woke the deployment."""


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
        self._claims = OneAtATime()

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
        welcome = partial(self._welcome, hello, bound=sender is not None, challenged=challenged)
        if row.owner_instance == hello.instance_id:
            held = await self._store.read(partial(_held, hello=hello))
            if held is not None:  # the owner again: nothing to write or wait for
                return held if isinstance(held, Refused) else welcome(held)
        async with self._claims.one(hello.deployment_id):
            # Its own transaction, never a group's: the claim decides on the
            # owner's liveness as this hub's sessions show it.
            claimed = await self._store.transact(self._claim_body(hello, row.public_key))
            if isinstance(claimed, Refused):
                return claimed
            # Claimed and committed, its session not open yet: a claim of the
            # same deployment waits here (a copy must find this owner live).
            await afailpoint("hub.hello.before_session")
            return welcome(claimed)

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
