"""The status vocabularies of the hub's own tables: a dispatch's, an
approval's, and the dead letters of quarantined envelopes.

A run's and a deployment's statuses are the runtime's (``runtime.RunStatus``,
``DeploymentStatus``), shared with the sidecar and classified in one place.
"""

from __future__ import annotations

from enum import StrEnum


class DispatchStatus(StrEnum):
    """A dispatch's life: reserved -> delivered -> processed, or cancelled;
    or parked, and reserved again when it is retried."""

    RESERVED = "reserved"  # accepted, not yet persisted by the sidecar
    DELIVERED = "delivered"  # the sidecar acknowledged it as stored
    PROCESSED = "processed"  # its handler call committed
    CANCELLED = "cancelled"  # its deployment or run ended before processing
    PARKED = "parked"  # its handler failed past the retry budget: set aside until retried


KEEPS_BODY = (
    DispatchStatus.RESERVED.value,
    DispatchStatus.DELIVERED.value,
    DispatchStatus.PARKED.value,
)
"""The dispatches whose body and raw message stay: those still to be
processed, and the parked ones (a retry sends them again)."""


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    DECIDED = "decided"


# dead_letter.source of an envelope a sidecar set aside (counted per deployment).
QUARANTINE_SOURCE = "quarantine"
