"""Quarantined envelopes: the dispatch a sidecar could not read, cancelled,
and the quarantined ones counted.

The dispatch is found by its id within the sender's deployment (the sidecar
may not have read the run id): it is cancelled with its reason in
``last_error``, so it is neither delivered again nor waited for (the
Welcome's floor counts a cancelled dispatch as settled). Each quarantine is
also a dead letter of source ``quarantine`` naming the deployment, kept
whatever the caps (``dead_letters.py``): :func:`count_quarantined` counts
them from the store, so the count survives a restart.
"""

from __future__ import annotations

from typing import NamedTuple

from ..schema import QUARANTINE_SOURCE, DispatchStatus
from ..sql import Tx, sql


class QuarantinedDispatch(NamedTuple):
    """The dispatch a quarantine names: its run, and the blobs it holds."""

    run_id: str
    body_digest: str | None
    raw_digest: str | None


_DISPATCH = sql(
    "SELECT run_id, body_digest, raw_digest FROM workflow_run_dispatch"
    " WHERE id = ? AND deployment_id = ?"
)
_CANCEL = sql(
    "UPDATE workflow_run_dispatch SET status = ?, processed_at = ?, last_error = ?"
    " WHERE id = ? AND status IN (?, ?)"
)
_COUNT = sql("SELECT deployment_id, COUNT(*) FROM dead_letter WHERE source = ? GROUP BY 1")


def quarantined_dispatch(
    tx: Tx, dispatch_id: str, deployment_id: str
) -> QuarantinedDispatch | None:
    """The deployment's dispatch ``dispatch_id``; None: it has no such dispatch."""
    row = tx.fetch_one(_DISPATCH, (dispatch_id, deployment_id))
    return None if row is None else QuarantinedDispatch(*row)


def cancel_quarantined(tx: Tx, dispatch_id: str, reason: str, now: float) -> bool:
    """Cancel the dispatch, still open, for ``reason``; whether it was open."""
    params = (
        DispatchStatus.CANCELLED,
        now,
        reason,
        dispatch_id,
        DispatchStatus.RESERVED,
        DispatchStatus.DELIVERED,
    )
    return tx.execute(_CANCEL, params) == 1


def count_quarantined(tx: Tx) -> dict[str, int]:
    """Deployment id -> envelopes quarantined, for each with any."""
    return {str(row[0] or ""): int(row[1]) for row in tx.fetch_all(_COUNT, (QUARANTINE_SOURCE,))}
