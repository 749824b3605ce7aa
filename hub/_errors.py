"""The hub's exceptions: one root (HubError), one subclass per failure.

Each error that reaches an HTTP client carries its HTTP status and a stable
snake_case ``reason``; the HTTP layer renders ``{"status", "reason", "detail"}``
from these and nothing else.
"""

from __future__ import annotations

from runtime import MailrunError


class HubError(MailrunError):
    """Root of every error the hub raises on purpose."""

    http_status = 500
    reason = "internal_error"
    # "rejected" when the request was understood and refused by a rule,
    # "error" when it could not be processed at all.
    kind = "error"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.reason)
        self.detail = detail or self.reason


class StoreUnavailable(HubError):
    """The store could not commit (locked past busy_timeout, read-only, I/O)."""

    http_status = 503
    reason = "store_unavailable"


class AcceptFailed(HubError):
    """One trigger of a batch could not be stored (its batch mates were)."""

    reason = "accept_failed"


class MigrationError(HubError):
    """The database is in a state no migration knows how to move forward."""

    reason = "migration_failed"


class InvalidName(HubError):
    http_status = 422
    reason = "invalid_name"


class InvalidDeployment(HubError):
    http_status = 422
    reason = "invalid_deployment"


class NameTaken(HubError):
    http_status = 409
    reason = "name_taken"
    kind = "rejected"


class UnknownDeployment(HubError):
    http_status = 404
    reason = "unknown_deployment"


class UnknownRun(HubError):
    http_status = 404
    reason = "unknown_run"


class UnknownDispatch(HubError):
    http_status = 404
    reason = "unknown_dispatch"


class UnknownApproval(HubError):
    http_status = 404
    reason = "unknown_approval"


class ApprovalDecided(HubError):
    http_status = 409
    reason = "approval_decided"
    kind = "rejected"


class MalformedJson(HubError):
    http_status = 400
    reason = "malformed_json"


class InvalidMail(HubError):
    http_status = 422
    reason = "invalid_mail"


class InvalidRequest(HubError):
    http_status = 422
    reason = "invalid_request"


class PayloadTooLarge(HubError):
    http_status = 413
    reason = "payload_too_large"
    kind = "rejected"


class HubShuttingDown(HubError):
    """The acceptor is closed: the hub is stopping."""

    http_status = 503
    reason = "shutting_down"
