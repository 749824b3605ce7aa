"""The deployment row's owner: read for a hello, claimed by compare-and-set.

The row keeps the owning sidecar process (``owner_instance``), the home it
runs from (``owner_home``) and ``owner_epoch``, which every change of owner
bumps (who may claim is the wire's decision: ``hub.wire.ownership``). The
claim is one UPDATE matching the row exactly as it was read and still not
deleted, so a deletion or another claim committed meanwhile makes it match
nothing. A new epoch sends everything delivered but not processed again:
the new owner may not have the old one's inbox.
"""

from __future__ import annotations

from typing import NamedTuple

from ..schema import DispatchStatus
from ..sql import Tx, sql


class OwnerRow(NamedTuple):
    """A deployment as a hello's claim reads it."""

    public_key: str
    owner_instance: str | None
    owner_home: str | None
    owner_epoch: int
    deleted_at: float | None
    anchor: str | None
    """Its anchor run's status (None: no anchor row)."""


_OWNER = sql("""
SELECT d.public_key, d.owner_instance, d.owner_home, d.owner_epoch, d.deleted_at,
       a.status AS anchor
FROM deployment d LEFT JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1
WHERE d.id = ?
""")
_CLAIM = sql(
    "UPDATE deployment SET owner_instance = ?, owner_home = ?, owner_epoch = ?"
    " WHERE id = ? AND owner_instance IS ? AND owner_home IS ? AND owner_epoch = ?"
    " AND deleted_at IS NULL",
    postgres="UPDATE deployment SET owner_instance = ?, owner_home = ?, owner_epoch = ?"
    " WHERE id = ? AND owner_instance IS NOT DISTINCT FROM ?"
    " AND owner_home IS NOT DISTINCT FROM ? AND owner_epoch = ? AND deleted_at IS NULL",
)
# The status compared is written out: bound, SQLite would compile the
# statement again at every run (the table's partial index on a status).
_REDELIVER = sql(
    "UPDATE workflow_run_dispatch SET status = ?, delivered_at = NULL"
    f" WHERE deployment_id = ? AND status = '{DispatchStatus.DELIVERED}'"
)


def read_owner(tx: Tx, deployment_id: str) -> OwnerRow | None:
    """The deployment's key, owner and liveness; None for an unknown one."""
    row = tx.fetch_one(_OWNER, (deployment_id,))
    return None if row is None else OwnerRow(*row)


def commit_claim(
    tx: Tx, deployment_id: str, read: OwnerRow, instance_id: str, home: str, owner_epoch: int
) -> bool:
    """Inside the caller's write transaction: make ``instance_id`` (from
    ``home``) the owner under ``owner_epoch`` if the row is still as
    ``read``; False (nothing written) when it changed meanwhile. A new epoch
    puts the deployment's delivered dispatches back to reserved."""
    claimed = tx.execute(
        _CLAIM,
        (
            instance_id,
            home,
            owner_epoch,
            deployment_id,
            read.owner_instance,
            read.owner_home,
            read.owner_epoch,
        ),
    )
    if claimed != 1:
        return False
    if owner_epoch != read.owner_epoch:
        tx.execute(_REDELIVER, (DispatchStatus.RESERVED, deployment_id))
    return True
