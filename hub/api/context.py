"""What every route module of the API is given: the store, the acceptor, the
settings, and the helpers they share (reading a body, answering a trigger,
a ``?limit=``)."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

from .._errors import HubError, InvalidRequest, error_for
from ..intake import Acceptor, with_digest
from ..store import Rejected, Store, Trigger
from .requests import is_number, read_json
from .responses import json_response

T = TypeVar("T")


@dataclass(frozen=True)
class ApiSettings:
    domain: str
    """The mail domain of new deployments that name none."""
    nats_url: str
    subject_prefix: str
    sidecar_root: Path | None
    max_body: int
    body_timeout: float = 60.0  # seconds for a whole request body to arrive
    domains: tuple[str, ...] = ()
    """The hub's other mail domains: a new deployment may name one."""
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The hub's environment at its start: a replay's scratch process gets a
    sidecar's share of it."""


def receipt_status(receipt: object) -> int:
    """A trigger's HTTP status: 202, or its rejection's."""
    if isinstance(receipt, Rejected):
        error = error_for(receipt.reason)
        return error.http_status if error is not None else 409
    return 202


def receipt_response(receipt: object) -> Response:
    return json_response(receipt, receipt_status(receipt))


def query_limit(request: Request, default: int = 100, most: int = 1000) -> int:
    """A listing's ``?limit=``: 1 to ``most``, else 422."""
    text = request.query_params.get("limit", str(default))
    if not is_number(text) or not 1 <= int(text) <= most:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {most}")
    return int(text)


@dataclass(frozen=True)
class RouteContext:
    store: Store
    acceptor: Acceptor
    settings: ApiSettings

    @property
    def request_limit(self) -> int:
        # JSON escaping and base64 inflate a body: the raw request may be this
        # much larger than the body it carries before it is refused unread.
        return self.settings.max_body * 2 + 64 * 1024

    def read(
        self, request: Request, type_: type[T], invalid: type[HubError], limit: int | None = None
    ) -> Awaitable[T]:
        """The request's JSON body as ``type_``, within ``limit`` bytes (the
        request limit by default) and the settings' body timeout."""
        return read_json(
            request,
            type_,
            limit=self.request_limit if limit is None else limit,
            invalid=invalid,
            timeout=self.settings.body_timeout,
        )

    async def accept(self, trigger: Trigger) -> Response:
        """Accept ``trigger`` and answer with its receipt (202, or the rejection's status)."""
        return receipt_response(await self.acceptor.accept(await with_digest(trigger)))
