"""Who may call the HTTP API (docs/design.md section 9): one decision, ``Gate.decide``,
for every request, whichever way it is answered.

A request is the admin's when it carries ``Authorization: Bearer <token>``
or the console's session cookie; only ``GET /healthz`` answers without (and
then says only its status: the handler reads ``request.state.admin``).
:class:`AdminAuth`, the middleware in front of the whole app, asks the gate
about every request, so a route added later is guarded without asking; the
server's mail fast path (``mail.py``) asks it too and takes a request only
when the answer is :data:`ADMIN`, leaving every refusal to the middleware,
which answers it the one way.

The console logs in by the URL ``mailrun up`` prints, ``GET /?token=...``:
the answer sets the cookie (HttpOnly, so no script reads it; SameSite=Strict,
so no other site's page sends it) and redirects to ``/``, which drops the
token from the address bar and history. SameSite does not tell ports apart:
a page served by another program on ``127.0.0.1`` is "same site". So a
request authenticated by the cookie that may change something (anything but
GET, HEAD, OPTIONS) must also carry an ``Origin`` naming this hub's own
host and port. A Bearer token needs no such check: no page can attach one
without knowing the token.

Every request that carries a body must say ``Content-Type:
application/json``: browsers send text/plain and form bodies across sites
without a CORS preflight, and JSON only after one, which the hub never grants.
"""

from __future__ import annotations

import hmac
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from starlette.datastructures import QueryParams
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .._errors import HubError, Unauthorized, UnsupportedMediaType
from .responses import hub_error_response

COOKIE = "mailrun_session"
OPEN_PATH = "/healthz"
LOGIN_PATH = "/"
WEBSOCKET = "WEBSOCKET"
"""The method a websocket's handshake is decided as: one that may change state."""
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="mailrun"'}
# The login URL carries the token: it must reach no other site, nor a cache.
_LOGIN_HEADERS = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
_NO_CREDENTIALS = (
    "send 'Authorization: Bearer <token>' (the token is in the hub's state dir, file admin-token)"
)

Headers = Sequence[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Pass:
    """The request goes on to its route."""

    admin: bool  # False: the open /healthz, asked without credentials


ADMIN = Pass(admin=True)
OPEN = Pass(admin=False)


@dataclass(frozen=True, slots=True)
class Refusal:
    """The request is refused with ``error`` (and these headers)."""

    error: HubError
    headers: Mapping[str, str] = field(default_factory=dict)

    def response(self) -> Response:
        return hub_error_response(self.error, self.headers)


@dataclass(frozen=True, slots=True)
class Login:
    """The console's login URL, with the right token: set the cookie."""

    token: str

    def response(self) -> Response:
        response = RedirectResponse(LOGIN_PATH, status_code=303, headers=_LOGIN_HEADERS)
        response.set_cookie(COOKIE, self.token, path="/", httponly=True, samesite="strict")
        return response


Decision = Pass | Refusal | Login


class Gate:
    """The admin token's one decision about a request."""

    def __init__(self, token: str) -> None:
        self._token = token.encode("ascii")

    def decide(self, method: str, path: str, query: bytes, headers: Headers) -> Decision:
        """Whether a request (its method, path, query string and lowercased
        headers, as an ASGI scope has them) passes, and how it is answered if not."""
        if query and method in ("GET", "HEAD") and path == LOGIN_PATH:
            token = QueryParams(query.decode("latin-1")).get("token")
            if token is not None:
                if self._matches(token):
                    return Login(token)
                return Refusal(
                    Unauthorized("the token in the URL is not this hub's admin token"),
                    {**_CHALLENGE, **_LOGIN_HEADERS},
                )
        authorization = content_type = origin = host = None
        cookies: list[bytes] = []
        has_body = False
        for name, value in headers:
            if name == b"authorization":
                authorization = value if authorization is None else authorization
            elif name == b"content-type":
                content_type = value if content_type is None else content_type
            elif name == b"content-length":
                has_body = has_body or value != b"0"
            elif name == b"transfer-encoding":
                has_body = True
            elif name == b"cookie":
                cookies.append(value)
            elif name == b"origin":
                origin = value if origin is None else origin
            elif name == b"host":
                host = value if host is None else host
        try:
            admin = self._admin(authorization, cookies, origin, host, method in _SAFE_METHODS)
        except Unauthorized as exc:
            return Refusal(exc, _CHALLENGE)
        if not admin and (path != OPEN_PATH or method == WEBSOCKET):
            return Refusal(Unauthorized(_NO_CREDENTIALS), _CHALLENGE)
        if has_body and not is_json(_text(content_type)):
            media_type = _text(content_type).partition(";")[0].strip().lower()
            return Refusal(
                UnsupportedMediaType(
                    f"a request body must be 'application/json', not {media_type or 'unlabelled'!r}"
                )
            )
        return ADMIN if admin else OPEN

    def _admin(
        self,
        authorization: bytes | None,
        cookies: list[bytes],
        origin: bytes | None,
        host: bytes | None,
        safe: bool,
    ) -> bool:
        """Whether the request is the admin's (``safe``: it cannot change
        anything); ``Unauthorized`` for wrong credentials."""
        if authorization is not None:
            if not bearer_is(self._token, authorization.decode("latin-1")):
                raise Unauthorized("the bearer token is not this hub's admin token")
            return True
        cookie = _cookie(cookies)
        if cookie is None:
            return False
        if not self._matches(cookie):
            raise Unauthorized("the session cookie is not this hub's (log in again)")
        if not safe and not _same_origin(origin, host):
            raise Unauthorized(
                "a request authenticated by the session cookie must come from the"
                " hub's own origin (its 'Origin' header names another site, or none)"
            )
        return True

    def _matches(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self._token)


class AdminAuth:
    """The middleware around the whole app: the gate's decision, answered."""

    def __init__(self, app: ASGIApp, *, gate: Gate) -> None:
        self.app = app
        self._gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        method = scope["method"] if kind == "http" else WEBSOCKET
        decision = self._gate.decide(
            method, scope["path"], scope.get("query_string", b""), scope["headers"]
        )
        if isinstance(decision, Pass):
            scope.setdefault("state", {})["admin"] = decision.admin
            await self.app(scope, receive, send)
        elif kind == "websocket":
            # Closed before the handshake completes: the client sees 403.
            await send({"type": "websocket.close", "code": 1008})
        else:
            await decision.response()(scope, receive, send)


def bearer_is(token: bytes, authorization: str) -> bool:
    """Whether an ``Authorization`` header's value is ``Bearer <token>``."""
    scheme, _, credentials = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        credentials.strip().encode("utf-8", "replace"), token
    )


def is_json(content_type: str) -> bool:
    """Whether a ``Content-Type`` header's value names JSON (parameters aside)."""
    return content_type.partition(";")[0].strip().lower() == "application/json"


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("latin-1")


def _cookie(headers: list[bytes]) -> str | None:
    for header in headers:
        for pair in header.decode("latin-1").split(";"):
            name, sep, value = pair.strip().partition("=")
            if sep and name == COOKIE:
                return value.strip().strip('"')
    return None


def _same_origin(origin: bytes | None, host: bytes | None) -> bool:
    """The ``Origin`` names the host and port this request was sent to.

    The scheme is left out: behind a TLS proxy the page is https while the
    hub is reached over http."""
    if not origin or not host or origin == b"null":
        return False
    netloc = urllib.parse.urlsplit(origin.decode("latin-1")).netloc
    return bool(netloc) and netloc.lower() == host.decode("latin-1").lower()
