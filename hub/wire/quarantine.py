"""Quarantined envelopes: a sidecar could not read one and set it aside.

The hub records it where an operator looks: a dead letter naming the
deployment (``source = 'quarantine'``, counted as the deployment's
``quarantined``), and the dispatch cancelled with ``last_error
"quarantined: <reason>"``, so it is neither delivered again nor waited for
(the Welcome floor counts a cancelled dispatch as settled). The event is
kept in ``run_event`` like any other, idempotent by its id, under the run
that the hub's own dispatch row names: the sidecar may not know it.
"""

from __future__ import annotations

import logging

from runtime import Connection, EnvelopeQuarantined, encode

from .._errors import UnknownDispatch
from ..store import QUARANTINE_SOURCE, DispatchStatus, fetch_one
from .retention import DeadLetter, DeadLetters

log = logging.getLogger("mailrun.hub.events")

_REASON_LIMIT = 1000


async def ingest_quarantined(
    db: Connection,
    deployment_id: str,
    subject: str,
    event: EnvelopeQuarantined,
    now: float,
    letters: DeadLetters,
) -> bool:
    """Apply ``event`` (inside the caller's write transaction) unless it was
    applied before; True when it freed a claim-checked body or raw message."""
    dispatch = await fetch_one(
        db,
        "SELECT run_id, body_digest, raw_digest FROM workflow_run_dispatch"
        " WHERE id = ? AND deployment_id = ?",
        (event.dispatch_id, deployment_id),
    )
    data = encode(event)
    if dispatch is None:
        log.warning("%s quarantined unknown dispatch %s", deployment_id, event.dispatch_id)
        if letters.admit("events", deployment_id):
            reason = f"{UnknownDispatch.reason}: {deployment_id}"
            await letters.keep(db, DeadLetter("events", subject, reason, data, deployment_id, now))
        return False
    cur = await db.execute(
        "INSERT OR IGNORE INTO run_event (id, run_id, deployment_id, kind, payload, at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            event.event_id,
            dispatch["run_id"],
            deployment_id,
            type(event).__name__,
            data,
            event.at or now,
        ),
    )
    if cur.rowcount != 1:
        return False  # a resent event: applied already
    reason = f"quarantined: {event.reason or 'unreadable envelope'}"[:_REASON_LIMIT]
    log.warning("%s dispatch %s %s", deployment_id, event.dispatch_id, reason)
    # Not rate limited: each is a dispatch cancelled here, counted on its deployment.
    letter = DeadLetter(QUARANTINE_SOURCE, subject, reason, data, deployment_id, now)
    await letters.keep(db, letter)
    cur = await db.execute(
        "UPDATE workflow_run_dispatch SET status = ?, processed_at = ?, last_error = ?"
        " WHERE id = ? AND status IN (?, ?)",
        (
            DispatchStatus.CANCELLED,
            now,
            reason,
            event.dispatch_id,
            DispatchStatus.RESERVED,
            DispatchStatus.DELIVERED,
        ),
    )
    held_blob = dispatch["body_digest"] is not None or dispatch["raw_digest"] is not None
    return cur.rowcount == 1 and held_blob
