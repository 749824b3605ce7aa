"""JSON responses, and the one error body every failure gets.

Every error is ``{"status", "reason", "detail"}`` with a stable snake_case
reason: ``"rejected"`` when a rule refused the request, ``"error"`` when it
could not be processed.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from starlette.responses import Response

from .._errors import HubError


def json_response(
    value: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(msgspec.json.encode(value), status, headers, media_type="application/json")


def error_response(
    status: int, kind: str, reason: str, detail: str, headers: Mapping[str, str] | None = None
) -> Response:
    return json_response({"status": kind, "reason": reason, "detail": detail}, status, headers)


def hub_error_response(exc: HubError, headers: Mapping[str, str] | None = None) -> Response:
    return error_response(exc.http_status, exc.kind, exc.reason, exc.detail, headers)
