"""The errors of the hub's client libraries: the client of its HTTP API (the
CLI, ``up``, ``demo``) and the producers' client of its NATS mail ingress."""

from __future__ import annotations

from .base import HubError


class HubClientError(HubError):
    """Root of the client's errors."""

    reason = "client_error"


class HubUnreachable(HubClientError):
    """No hub answered at the URL (refused, unknown host, network down)."""

    reason = "hub_unreachable"


class HubTimeout(HubUnreachable, TimeoutError):
    """The hub did not answer within the client's timeout."""

    reason = "hub_timeout"


class HubBadResponse(HubClientError):
    """The hub answered something that is not the JSON object it should be."""

    reason = "bad_response"


class HubResponseError(HubClientError):
    """The hub answered with an error status; ``body`` is its JSON as sent."""

    def __init__(self, http_status: int, body: dict[str, object]) -> None:
        reason = str(body.get("reason") or f"http_{http_status}")
        detail = str(body.get("detail") or "")
        super().__init__(detail or reason)
        self.http_status = http_status
        self.reason = reason
        self.detail = detail
        self.status = str(body.get("status") or "error")
        self.body = body


class IngressError(HubError):
    """Root of the ingress client's errors."""

    reason = "ingress_error"


class IngressUnavailable(IngressError):
    """The request got no answer (no hub serves the ingress, the connection
    is down, or the answer did not come in time): whether it was accepted is
    unknown, so send it again, with its message ids."""

    reason = "ingress_unavailable"


class IngressRefused(IngressError):
    """The hub refused the whole request; ``reason`` is its code as it came."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail or reason
