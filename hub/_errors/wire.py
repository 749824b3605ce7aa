"""The wire's errors: a sidecar's frame refused, by session, epoch or lease;
the reason goes back to the sidecar in a Refused frame."""

from __future__ import annotations

from runtime import Reason

from .base import HubError


class UnknownSession(HubError):
    """The frame names a session this hub never opened (or forgot): re-hello."""

    reason = Reason.UNKNOWN_SESSION


class StaleEpoch(HubError):
    """The frame's owner epoch is not the deployment's current one: fenced."""

    reason = Reason.STALE_EPOCH


class LeaseLost(UnknownSession):
    """This hub no longer serves the deployment (several hubs: another holds
    its lease, or none does yet). Nothing was written; to the sidecar it is
    an unknown session, so it says hello again and reaches the holder."""
