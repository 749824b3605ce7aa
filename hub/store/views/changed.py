"""The deployments changed after a point of the change feed: what a listing
with ``changed_after`` answers, so that a caller that lists the
deployments every half second (``mailrun up``) reads what changed, not
every deployment each time.

A point is a change id (the listing's ``cursor``; 0 asks for the whole
listing and a point to go on from). Every change of what a
deployment is shown as (created, deleted, paused, asleep or awake, a
version) writes a ``deployment`` change in its transaction; the views are
read after the point, so they are at least as new as it. The whole
listing comes instead when the point cannot be followed: changes after it
were trimmed, or it is past this database's last change (another
database's). On a database several hubs write, the point stops at the
first change an open transaction may still precede (``settled_changes``).
"""

from __future__ import annotations

import msgspec

from ..feed import (
    FEED_HOLD,
    ChangeKind,
    database_now,
    last_change_id,
    read_changes,
    settled_changes,
    settled_horizon,
)
from ..sql import Tx, sql
from .queries import DeploymentView, get_deployment, list_deployments

_CHANGED = sql(
    f"SELECT DISTINCT row_id FROM change WHERE kind = '{ChangeKind.DEPLOYMENT.value}'"
    " AND id > ? AND id <= ?"
)
_OLDEST = sql("SELECT MIN(id) FROM change")
SETTLE_LIMIT = 10_000
"""Changes read at most to find where a shared database's feed settles."""
FEW = 50
"""Past this many changed deployments, one listing of all is cheaper than a
read of each."""


class Changed(msgspec.Struct, frozen=True):
    """The deployments a listing answers, the point it reached, and whether
    it is the whole listing (not only what changed)."""

    deployments: list[DeploymentView]
    cursor: int
    whole: bool


def deployments_changed(tx: Tx, after: int, *, shared: bool) -> Changed:
    """The deployments changed after ``after`` (0: all of them), and the
    point to ask from next; ``shared``: the database has several writers."""
    last = last_change_id(tx)
    if after <= 0 or after > last or not _kept(tx, after, last):
        cursor = settled_horizon(tx, FEED_HOLD) if shared else last
        return Changed(list_deployments(tx), cursor, whole=True)
    upto = _settled(tx, after) if shared else last
    if upto == after:
        return Changed([], after, whole=False)
    ids = {str(row[0]) for row in tx.fetch_all(_CHANGED, (after, upto))}
    if len(ids) > FEW:
        views = [view for view in list_deployments(tx) if view.id in ids]
    else:
        views = [get_deployment(tx, dep) for dep in sorted(ids)]
    return Changed(views, upto, whole=False)


def _kept(tx: Tx, after: int, last: int) -> bool:
    """Whether every change after ``after`` is still in the feed."""
    if after == last:
        return True
    row = tx.fetch_one(_OLDEST)
    oldest = row[0] if row is not None else None
    return oldest is not None and int(oldest) <= after + 1


def _settled(tx: Tx, after: int) -> int:
    changes = read_changes(tx, after, SETTLE_LIMIT)
    settled = settled_changes(changes, after, database_now(tx), FEED_HOLD)
    return settled[-1].id if settled else after
