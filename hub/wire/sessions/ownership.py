"""Who owns a deployment: the claim a signed hello may make, decided here.

A sidecar process is an *incarnation* (``instance_id``, new at every start)
running from a *home* (an id of its state directory itself, so a copy of the
directory is another home; an exclusive lock on the directory means at most
one process runs from a home). The deployment row keeps the owner's
incarnation, home and ``owner_epoch``; every change of owner bumps the epoch,
and every frame carries it, so the previous owner is fenced everywhere.

A hello is welcomed when it is:

- the owner itself saying hello again (hub restart, reconnect): same epoch;
- a new incarnation in the owner's home (a restart after a crash: the lock
  proves the old process is gone), or the first owner ever: epoch + 1, and
  the process carries on from its own disk;
- ``--takeover``, or any home once the owner has been silent for the lease
  (its host died): epoch + 1, and the process starts from the hub's state
  of every run (``Welcome.from_hub``), since its disk is not the owner's.

Anything else is ``owner_conflict``. The claim is committed by the store
(``hub.store``'s ``commit_claim``): one compare-and-set UPDATE on what was
read, matching a live deployment only, so a deletion or another claim
committed meanwhile makes it match nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from runtime import Hello, Reason, Refused
from runtime.wire import anchor_is_live

from ...store import OwnerRow

OWNER_LEASE = 15.0
"""Seconds of silence after which an owner counts as gone: any home may then
adopt the deployment without ``--takeover``. Well above the health probe
interval, so a live owner is never taken for a dead one."""


@dataclass(frozen=True, slots=True)
class OwnerClaim:
    """What a welcomed hello gets: the epoch it owns under, and whether it must
    start from the hub's state (ownership came from another home)."""

    owner_epoch: int
    from_hub: bool
    moved: bool
    """The owner changed: the previous one is fenced and told."""


def not_live(row: OwnerRow | None, deployment_id: str) -> Refused | None:
    """The refusal for a deployment that is unknown or deleted; None when live."""
    if row is None:
        return Refused(reason=Reason.UNKNOWN_DEPLOYMENT, detail=deployment_id)
    if row.deleted_at is not None or not anchor_is_live(row.anchor or ""):
        return Refused(reason=Reason.DEPLOYMENT_NOT_LIVE, detail=deployment_id)
    return None


def home_of(hello: Hello) -> str:
    """An older sidecar sends no home; its persistent instance id stands for it."""
    return hello.home or hello.instance_id


def decide(
    row: OwnerRow, hello: Hello, *, owner_live: bool, unconfirmed: bool = False
) -> OwnerClaim | Refused:
    """The claim ``hello`` may make on the deployment as ``row`` shows it.

    ``unconfirmed``: the owner counts as live only because the hub restarted
    less than a lease ago and has not heard from it yet. A hello from
    another home is then told to ask again (``owner_unconfirmed``, which a
    sidecar retries), not refused for good: a state dir restored elsewhere
    (a new home) is started by ``mailrun up`` right after its hub, inside
    that window, and would otherwise never come up."""
    owner, home, epoch = row.owner_instance, row.owner_home, int(row.owner_epoch)
    mine = home_of(hello)
    if owner == hello.instance_id:
        return OwnerClaim(epoch, from_hub=False, moved=False)
    if owner is None and home is None:
        return OwnerClaim(epoch + 1, from_hub=False, moved=False)  # the first owner
    if home == mine or (home is None and hello.previous_instance == owner):
        # The same directory (a row from before homes were recorded: the same
        # persistent instance id); its lock proves the old process is gone, so
        # no notice is due: one would reach only the new process (a restart, a
        # wake), which would take it for its own and say hello twice.
        return OwnerClaim(epoch + 1, from_hub=False, moved=False)
    if hello.takeover or owner is None or not owner_live:
        return OwnerClaim(epoch + 1, from_hub=True, moved=owner is not None)
    if unconfirmed:
        return Refused(
            reason=Reason.OWNER_UNCONFIRMED,
            detail="the hub restarted recently; its recorded owner may still say hello: ask again",
        )
    return Refused(
        reason=Reason.OWNER_CONFLICT,
        detail="another sidecar process owns this deployment and is alive",
    )


class OneAtATime:
    """One claim of a deployment at a time (a lock a deployment, kept only
    while a claim holds or waits for it)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def one(self, deployment_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(deployment_id, (None, 0))
        if lock is None:
            lock = anyio.Lock()
        self._locks[deployment_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[deployment_id]
            if users > 1:
                self._locks[deployment_id] = (lock, users - 1)
            else:
                del self._locks[deployment_id]

    def __len__(self) -> int:
        return len(self._locks)
