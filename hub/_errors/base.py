"""The root of the hub's exceptions, ``HubError``: an HTTP status, a stable
snake_case ``reason`` and a ``detail`` for people."""

from __future__ import annotations

from runtime import MailrunError, Reason


class HubError(MailrunError):
    """Root of every error the hub raises on purpose."""

    http_status = 500
    reason: str = Reason.INTERNAL_ERROR
    # "rejected" when the request was understood and refused by a rule,
    # "error" when it could not be processed at all.
    kind = "error"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.reason)
        self.detail = detail or self.reason
