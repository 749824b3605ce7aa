"""Who owns a deployment: the claim a signed hello makes, decided and committed.

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

Anything else is ``owner_conflict``. The claim is one compare-and-set UPDATE
on what was read, matching a live deployment only, so a deletion or another
claim committed meanwhile makes it match nothing.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from runtime import Connection, Hello, Reason, Refused, anchor_is_live

from ..store import DispatchStatus, fetch_one

OWNER_LEASE = 15.0
"""Seconds of silence after which an owner counts as gone: any home may then
adopt the deployment without ``--takeover``. Well above the health probe
interval, so a live owner is never taken for a dead one."""

_DEPLOYMENT = """
SELECT d.public_key, d.owner_instance, d.owner_home, d.owner_epoch, d.deleted_at,
       a.status AS anchor
FROM deployment d LEFT JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1
WHERE d.id = ?
"""


@dataclass(frozen=True, slots=True)
class Claim:
    """What a welcomed hello gets: the epoch it owns under, and whether it must
    start from the hub's state (ownership came from another home)."""

    owner_epoch: int
    from_hub: bool
    moved: bool
    """The owner changed: the previous one is fenced and told."""


async def read_deployment(db: Connection, deployment_id: str) -> sqlite3.Row | None:
    return await fetch_one(db, _DEPLOYMENT, (deployment_id,))


def not_live(row: sqlite3.Row | None, deployment_id: str) -> Refused | None:
    """The refusal for a deployment that is unknown or deleted; None when live."""
    if row is None:
        return Refused(reason=Reason.UNKNOWN_DEPLOYMENT, detail=deployment_id)
    if row["deleted_at"] is not None or not anchor_is_live(row["anchor"] or ""):
        return Refused(reason=Reason.DEPLOYMENT_NOT_LIVE, detail=deployment_id)
    return None


def home_of(hello: Hello) -> str:
    """An older sidecar sends no home; its persistent instance id stands for it."""
    return hello.home or hello.instance_id


def decide(row: sqlite3.Row, hello: Hello, *, owner_live: bool) -> Claim | Refused:
    """The claim ``hello`` may make on the deployment as ``row`` shows it."""
    owner, home, epoch = row["owner_instance"], row["owner_home"], int(row["owner_epoch"])
    mine = home_of(hello)
    if owner == hello.instance_id:
        return Claim(epoch, from_hub=False, moved=False)
    if owner is None and home is None:
        return Claim(epoch + 1, from_hub=False, moved=False)  # the first owner
    if home == mine or (home is None and hello.previous_instance == owner):
        # The same directory (a row from before homes were recorded: the same
        # persistent instance id); its lock proves the old process is gone.
        return Claim(epoch + 1, from_hub=False, moved=owner is not None)
    if hello.takeover or owner is None or not owner_live:
        return Claim(epoch + 1, from_hub=True, moved=owner is not None)
    return Refused(
        reason=Reason.OWNER_CONFLICT,
        detail="another sidecar process owns this deployment and is alive",
    )


async def commit_claim(db: Connection, row: sqlite3.Row, hello: Hello, claim: Claim) -> bool:
    """Make ``claim`` inside the caller's write transaction; False when the row
    changed since it was read (another claim, a deletion): nothing written."""
    dep = hello.deployment_id
    cur = await db.execute(
        "UPDATE deployment SET owner_instance = ?, owner_home = ?, owner_epoch = ?"
        " WHERE id = ? AND owner_instance IS ? AND owner_home IS ? AND owner_epoch = ?"
        " AND deleted_at IS NULL",
        (
            hello.instance_id,
            home_of(hello),
            claim.owner_epoch,
            dep,
            row["owner_instance"],
            row["owner_home"],
            row["owner_epoch"],
        ),
    )
    if cur.rowcount != 1:
        return False
    if claim.owner_epoch != row["owner_epoch"]:
        # The new owner may not have the old owner's inbox: everything
        # delivered but not processed is delivered again (a sidecar that
        # does have it answers `duplicate`).
        await db.execute(
            "UPDATE workflow_run_dispatch SET status = ?, delivered_at = NULL"
            " WHERE deployment_id = ? AND status = ?",
            (DispatchStatus.RESERVED, dep, DispatchStatus.DELIVERED),
        )
    return True


async def floor_seq(db: Connection, deployment_id: str) -> int:
    """The highest seq up to which every dispatch of the deployment is settled
    (processed or cancelled): the sidecar need not wait for any of those."""
    row = await fetch_one(
        db,
        "SELECT COALESCE((SELECT MIN(seq) FROM workflow_run_dispatch WHERE deployment_id = ?"
        " AND status IN (?, ?)) - 1, (SELECT next_seq - 1 FROM deployment WHERE id = ?), 0)",
        (deployment_id, DispatchStatus.RESERVED, DispatchStatus.DELIVERED, deployment_id),
    )
    return max(0, int(row[0])) if row is not None else 0
