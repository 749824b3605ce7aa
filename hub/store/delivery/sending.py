"""Dispatches on their way to a sidecar: loaded in seq order, counted, and
the sidecar's answers recorded.

The dispatch table is the only queue: a lane loads the reserved rows past
the highest seq it has sent, and an acknowledged dispatch becomes
``delivered``; a refused one stays ``reserved`` with its attempt counted and
its reason kept, so it is simply loaded again. Nothing else changes a row
here. A paused deployment's rows are neither loaded nor counted. Answers
are recorded under the epoch (and lease) the frames were sent under
(``sessions.fencing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from runtime.wire import anchor_is_live

from ..schema import DispatchStatus
from ..sessions import Fence, check_fence
from ..sql import Tx, sql


class ReservedDispatch(NamedTuple):
    """A reserved dispatch with what its frame carries."""

    id: str
    run_id: str
    seq: int
    kind: str
    message_id: str | None
    sender: str | None
    subject: str | None
    body: bytes | None
    body_digest: str | None
    body_size: int
    raw_digest: str | None
    raw_size: int | None
    start_request_id: str | None
    address: str
    version: int
    code_digest: str | None
    """The digest of its version's sources (None: no version row)."""
    code_size: int | None
    context: bytes | None = None
    """The mail's MailContext as msgpack (None: not mail, or accepted before it was kept)."""


class ReservedCount(NamedTuple):
    """A deployment's dispatches waiting to be sent."""

    waiting: int
    oldest: float
    """When the oldest of them was accepted (epoch seconds)."""


# The statuses a WHERE compares a dispatch's to are written into the text,
# not bound: the table has a partial index on one status (dispatch_parked),
# and SQLite compiles a statement again at every run whose bound value could
# decide whether such an index applies (a load 88 us instead of 8).
_IS_RESERVED = f"status = '{DispatchStatus.RESERVED}'"

# The deployment's anchor status rides on each row (the last column), and a
# deleted or paused deployment yields none: a load that finds rows (a lone
# mail's) needs no statement of its own to know the deployment is live.
_RESERVED = sql(f"""
SELECT d.id, d.run_id, d.seq, d.kind, d.message_id, d.sender, d.subject, d.body,
       d.body_digest, d.body_size, d.raw_digest, d.raw_size, r.start_request_id, dep.address,
       COALESCE(d.version, 1) AS version, v.digest AS code_digest, v.size AS code_size,
       d.context, a.status AS anchor_status
FROM workflow_run_dispatch d
JOIN deployment dep ON dep.id = d.deployment_id
LEFT JOIN workflow_run a ON a.id = dep.id AND a.is_anchor = 1
LEFT JOIN workflow_run r ON r.id = d.run_id
LEFT JOIN deployment_version v ON v.deployment_id = d.deployment_id
  AND v.version = COALESCE(d.version, 1)
WHERE d.deployment_id = ? AND d.{_IS_RESERVED} AND d.seq > ?
  AND dep.deleted_at IS NULL AND dep.paused_at IS NULL
ORDER BY d.seq LIMIT ?
""")
_ANCHOR = sql("""
SELECT d.deleted_at, a.status, d.paused_at FROM deployment d
LEFT JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 WHERE d.id = ?
""")
# Per deployment, so that each count searches the (deployment_id, status,
# seq) index for its reserved rows: grouped over the table, the count read
# every dispatch ever kept, once a second.
_RESERVED_COUNTS = sql(f"""
SELECT id, n, oldest FROM (
  SELECT dep.id,
    (SELECT COUNT(*) FROM workflow_run_dispatch d
     WHERE d.deployment_id = dep.id AND d.{_IS_RESERVED}) AS n,
    (SELECT MIN(d.created_at) FROM workflow_run_dispatch d
     WHERE d.deployment_id = dep.id AND d.{_IS_RESERVED}) AS oldest
  FROM deployment dep WHERE dep.paused_at IS NULL
) counts WHERE n > 0
""")
# The acknowledged ids as one JSON array: one statement whatever their number.
_DELIVERED = sql(
    "UPDATE workflow_run_dispatch SET status = ?, delivered_at = ?"
    f" WHERE {_IS_RESERVED} AND id IN (SELECT value FROM json_each(?))",
    postgres="UPDATE workflow_run_dispatch SET status = ?, delivered_at = ?"
    f" WHERE {_IS_RESERVED}"
    " AND id IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)
_REFUSED = sql(
    "UPDATE workflow_run_dispatch SET attempts = attempts + 1, last_error = ?"
    f" WHERE id = ? AND {_IS_RESERVED}"
)


def load_reserved(
    tx: Tx, deployment_id: str, limit: int, after: int = 0
) -> list[ReservedDispatch] | None:
    """The first ``limit`` reserved dispatches past seq ``after``, in seq
    order; none while the deployment is paused; None once it is not live
    (deleted, or its anchor not)."""
    params = (deployment_id, after, limit)
    rows = tx.fetch_all(_RESERVED, params)
    if rows:
        if not anchor_is_live(rows[0][-1] or ""):
            return None
        return [ReservedDispatch(*tuple(row)[:-1]) for row in rows]
    # None found: deleted, not live, paused, or simply nothing reserved.
    anchor = tx.fetch_one(_ANCHOR, (deployment_id,))
    if anchor is None or anchor[0] is not None or not anchor_is_live(anchor[1] or ""):
        return None
    return []  # paused (kept until it is unpaused), or nothing to send


def count_reserved(tx: Tx) -> dict[str, ReservedCount]:
    """Deployment id -> how many dispatches wait to be sent and since when,
    for each deployment with any that is not paused (a paused one's wait on
    purpose)."""
    rows = tx.fetch_all(_RESERVED_COUNTS)
    return {row[0]: ReservedCount(int(row[1]), float(row[2])) for row in rows}


def mark_delivered(tx: Tx, acked: Sequence[str], now: float) -> None:
    """The ``acked`` dispatches still reserved become delivered at ``now``,
    inside a transaction that checked the fence they were sent under
    already (the events' transaction of their deployment: ``check_fence``
    once, whatever it writes)."""
    ids = msgspec.json.encode(acked).decode()
    tx.execute(_DELIVERED, (DispatchStatus.DELIVERED, now, ids))


def record_answers(
    tx: Tx,
    fence: Fence,
    acked: Sequence[str],
    refused: Sequence[tuple[str, str]],
    now: float,
) -> None:
    """Inside a write transaction, fenced (``StaleEpoch``, ``LeaseLost``):
    the ``acked`` dispatches still reserved become delivered; each of
    ``refused`` (dispatch id, reason) keeps its reason and counts an attempt.

    Acks count only while the epoch they were sent under is current: a
    takeover committed meanwhile has reset these rows for the new owner,
    and the old owner's ack must not mark them delivered."""
    check_fence(tx, fence)
    if acked:
        mark_delivered(tx, acked, now)
    if refused:
        tx.execute_many(_REFUSED, [(reason, dsp) for dsp, reason in refused])
