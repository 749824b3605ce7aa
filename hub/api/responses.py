"""JSON responses, and the one error body every failure gets.

Every error is ``{"status", "reason", "detail"}`` with a stable snake_case
reason: ``"rejected"`` when a rule refused the request, ``"error"`` when it
could not be processed. A bug answers 500 ``internal_error`` and its
traceback goes to the log, never to the client (``exception_handlers``).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .._errors import HubError

INTERNAL = "the hub failed to answer this request"
"""The detail of a 500: nothing of the fault itself."""


def json_response(
    value: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(msgspec.json.encode(value), status, headers, media_type="application/json")


def error_fields(exc: HubError) -> dict[str, str]:
    """The error body of ``exc``, as a mapping (a batch's receipt holds one)."""
    return {"status": exc.kind, "reason": exc.reason, "detail": exc.detail}


def error_body(exc: HubError) -> bytes:
    return msgspec.json.encode(error_fields(exc))


def error_response(
    status: int, kind: str, reason: str, detail: str, headers: Mapping[str, str] | None = None
) -> Response:
    return json_response({"status": kind, "reason": reason, "detail": detail}, status, headers)


def hub_error_response(exc: HubError, headers: Mapping[str, str] | None = None) -> Response:
    return error_response(exc.http_status, exc.kind, exc.reason, exc.detail, headers)


async def _hub_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HubError)
    return hub_error_response(exc)


async def _unexpected(request: Request, exc: Exception) -> Response:
    # The exception goes on to the server, which logs its traceback; the
    # client learns only that the fault was not its own.
    return hub_error_response(HubError(INTERNAL))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    reason = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, "error", reason, str(exc.detail))


EXCEPTION_HANDLERS = {HubError: _hub_error, HTTPException: _http_error, Exception: _unexpected}
"""The app's answers to what a route raises: every one the error body."""
