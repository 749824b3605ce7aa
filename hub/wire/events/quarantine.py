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

from runtime import EnvelopeQuarantined, encode

from ..._errors import UnknownDispatch
from ...store import (
    QUARANTINE_SOURCE,
    DeadLetter,
    Tx,
    cancel_quarantined,
    quarantined_dispatch,
    record_event,
)
from ..retention import DeadLetters

log = logging.getLogger("mailrun.hub.events")

_REASON_LIMIT = 1000


def ingest_quarantined(
    tx: Tx,
    deployment_id: str,
    subject: str,
    event: EnvelopeQuarantined,
    now: float,
    letters: DeadLetters,
) -> bool:
    """Apply ``event`` (inside the caller's write transaction) unless it was
    applied before; True when it freed a claim-checked body or raw message."""
    dispatch = quarantined_dispatch(tx, event.dispatch_id, deployment_id)
    data = encode(event)
    if dispatch is None:
        log.warning("%s quarantined unknown dispatch %s", deployment_id, event.dispatch_id)
        if letters.admit("events", deployment_id):
            reason = f"{UnknownDispatch.reason}: {deployment_id}"
            letters.keep(tx, DeadLetter("events", subject, reason, data, deployment_id, now))
        return False
    kind = type(event).__name__
    if not record_event(
        tx, event.event_id, dispatch.run_id, deployment_id, kind, data, event.at or now
    ):
        return False  # a resent event: applied already
    reason = f"quarantined: {event.reason or 'unreadable envelope'}"[:_REASON_LIMIT]
    log.warning("%s dispatch %s %s", deployment_id, event.dispatch_id, reason)
    # Not rate limited: each is a dispatch cancelled here, counted on its deployment.
    letters.keep(tx, DeadLetter(QUARANTINE_SOURCE, subject, reason, data, deployment_id, now))
    cancelled = cancel_quarantined(tx, event.dispatch_id, reason, now)
    held_blob = dispatch.body_digest is not None or dispatch.raw_digest is not None
    return cancelled and held_blob
