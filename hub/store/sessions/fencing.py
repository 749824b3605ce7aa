"""Fences: a write for a sidecar commits only under the owner epoch it was
made under and, with several hubs, while this hub holds the deployment's lease.

A takeover bumps the deployment's ``owner_epoch`` (``ownership.py``) and
resets its delivered dispatches for the new owner; a write under the old
epoch (an ack, an event, a mint) must then change nothing. With several
hubs on one PostgreSQL, a hub that lost a deployment's lease (paused past
its life, cut off) must change nothing either, even before it notices
(``leases.py``): the lease row is locked until the write it guards
commits, so the lease cannot change hands in between. Both checks run
inside the guarded write's own transaction.
"""

from __future__ import annotations

from typing import NamedTuple

from ..._errors import LeaseLost, StaleEpoch
from ..sql import Tx, sql


class LeaseToken(NamedTuple):
    """A deployment's lease as this hub holds it: its id, the lease's token."""

    hub_id: str
    token: int


class Fence(NamedTuple):
    """What a write for a deployment's sidecar is made under."""

    deployment_id: str
    owner_epoch: int
    lease: LeaseToken | None = None
    """None: one hub serves every deployment (no lease to check)."""


_EPOCH = sql("SELECT owner_epoch FROM deployment WHERE id = ?")
# The lease row stays locked until the guarded write commits (on SQLite,
# BEGIN IMMEDIATE holds the whole file anyway, and its hub_lease table,
# from migration 15, stays empty in a hub's use: one file has one hub).
_LEASE = sql(
    "SELECT hub_id, token FROM hub_lease WHERE deployment_id = ?",
    postgres="SELECT hub_id, token FROM hub_lease WHERE deployment_id = ? FOR UPDATE",
)


def check_fence(tx: Tx, fence: Fence) -> None:
    """Inside the guarded write's transaction: :class:`StaleEpoch` unless
    the fence's epoch is the deployment's current one, ``LeaseLost`` unless
    this hub still holds its lease (when it has one to hold)."""
    row = tx.fetch_one(_EPOCH, (fence.deployment_id,))
    if row is None or row[0] != fence.owner_epoch:
        raise StaleEpoch(f"epoch {fence.owner_epoch} is not the current owner's")
    if fence.lease is None:
        return
    held = tx.fetch_one(_LEASE, (fence.deployment_id,))
    hub_id, token = fence.lease
    if held is None or held[0] != hub_id or int(held[1]) != token:
        raise LeaseLost(f"{fence.deployment_id}: lease {token} of {hub_id} is no longer held")
