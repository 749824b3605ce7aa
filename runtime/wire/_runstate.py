"""The one run-state classifier: no other code compares status strings."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SUSPENDED = "suspended"
    """An item failed past its retry budget under the ``suspend`` policy: the
    run is live, takes triggers and holds its items until it is resumed."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DeploymentStatus(StrEnum):
    """Status of a deployment's anchor row (a deployment-phase status)."""

    DEPLOYED = "deployed"
    DELETED = "deleted"
    PAUSED = "paused"
    """Shown for a deployed one that is paused (its anchor stays
    ``deployed``): live, it takes triggers and keeps them undelivered."""
    ASLEEP = "asleep"
    """Shown for a deployed one whose sidecar fell asleep (scale to zero: its
    anchor stays ``deployed``): live, it takes triggers, and the next one
    wakes it. ``paused`` is shown before ``asleep``."""


_TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
_LIVE = frozenset({RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.SUSPENDED})
_HOLDING = frozenset({RunStatus.WAITING, RunStatus.SUSPENDED})
# Release 1 marked a live anchor 'running'; migration rewrites it, but a
# reader must not call such a deployment dead before that happens.
_LIVE_ANCHOR = frozenset(
    {
        DeploymentStatus.DEPLOYED.value,
        DeploymentStatus.PAUSED.value,
        DeploymentStatus.ASLEEP.value,
        "running",
    }
)


def is_terminal(status: str) -> bool:
    """A run that has ended: completed, failed or cancelled."""
    return status in _TERMINAL


def is_live(status: str) -> bool:
    """A run that can still make progress."""
    return status in _LIVE


def holds_items(status: str) -> bool:
    """A run that keeps the items delivered to it unprocessed on purpose.

    A run waiting on an approval holds what arrives until the decision, a
    suspended one until it is resumed (docs/design.md section 5), so its
    delivered items are not overdue, however old.
    """
    return status in _HOLDING


def accepts_trigger(status: str | None) -> bool:
    """Whether a new trigger may be accepted for a run in this status.

    ``None`` means the top-level run does not exist yet: the trigger mints it.
    """
    return status is None or status in _LIVE


def anchor_is_live(status: str) -> bool:
    """Whether a deployment (by its anchor row's status) takes triggers."""
    return status in _LIVE_ANCHOR
