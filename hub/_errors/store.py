"""The store's and the acceptor's errors: a transaction that could not
commit, a write that broke a constraint, an acceptor that is closing, a
database no migration can move."""

from __future__ import annotations

from runtime import Reason

from .base import HubError


class StoreUnavailable(HubError):
    """The store could not commit (locked past busy_timeout, read-only, I/O)."""

    http_status = 503
    reason = Reason.STORE_UNAVAILABLE


class StoreConflict(HubError):
    """A write broke one of the store's constraints (a unique key, say);
    whatever database is under it."""

    http_status = 409
    reason = "store_conflict"


class HubShuttingDown(HubError):
    """The acceptor is closed: the hub is stopping."""

    http_status = 503
    reason = "shutting_down"


class AcceptFailed(HubError):
    """One trigger of a batch could not be stored (its batch mates were)."""

    reason = "accept_failed"


class MigrationError(HubError):
    """The database is in a state no migration knows how to move forward."""

    reason = "migration_failed"
