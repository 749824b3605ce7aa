"""Who may call the HTTP API: the admin token (docs/design.md section 9).

An ASGI middleware in front of every route, so a route added later is
guarded without asking. A request is the admin's when it carries
``Authorization: Bearer <token>`` or the console's session cookie; only
``GET /healthz`` answers without (and then says only its status: the
handler reads ``request.state.admin``).

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

from starlette.datastructures import Headers, QueryParams
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .._errors import HubError, Unauthorized, UnsupportedMediaType
from .responses import hub_error_response

COOKIE = "mailrun_session"
OPEN_PATH = "/healthz"
LOGIN_PATH = "/"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="mailrun"'}
# The login URL carries the token: it must reach no other site, nor a cache.
_LOGIN_HEADERS = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


class AdminAuth:
    """The admin token's guard around the app."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self._token = token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            if scope["method"] in ("GET", "HEAD") and scope["path"] == LOGIN_PATH:
                token = QueryParams(scope["query_string"]).get("token")
                if token is not None:
                    await self._login(token)(scope, receive, send)
                    return
            admin = self._admin(headers, safe=scope["method"] in _SAFE_METHODS)
            if not admin and scope["path"] != OPEN_PATH:
                raise Unauthorized(
                    "send 'Authorization: Bearer <token>' (the token is in the hub's"
                    " state dir, file admin-token)"
                )
            _check_content_type(headers)
        except HubError as exc:
            extra = _CHALLENGE if isinstance(exc, Unauthorized) else None
            await hub_error_response(exc, extra)(scope, receive, send)
            return
        scope.setdefault("state", {})["admin"] = admin
        await self.app(scope, receive, send)

    def _matches(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self._token)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        # No route takes one yet; when one does, it is guarded like a request
        # that changes state: a browser opens a websocket to any origin, with
        # the cookie (closed before the handshake completes: 403).
        try:
            admin = self._admin(Headers(scope=scope), safe=False)
        except Unauthorized:
            admin = False
        if not admin:
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)

    def _admin(self, headers: Headers, *, safe: bool) -> bool:
        """Whether the request is the admin's (``safe``: it cannot change
        anything); ``Unauthorized`` for wrong credentials."""
        authorization = headers.get("authorization")
        if authorization is not None:
            if not bearer_is(self._token, authorization):
                raise Unauthorized("the bearer token is not this hub's admin token")
            return True
        cookie = _cookie(headers)
        if cookie is None:
            return False
        if not self._matches(cookie):
            raise Unauthorized("the session cookie is not this hub's (log in again)")
        if not safe and not _same_origin(headers):
            raise Unauthorized(
                "a request authenticated by the session cookie must come from the"
                " hub's own origin (its 'Origin' header names another site, or none)"
            )
        return True

    def _login(self, token: str) -> ASGIApp:
        if not self._matches(token):
            return hub_error_response(
                Unauthorized("the token in the URL is not this hub's admin token"),
                {**_CHALLENGE, **_LOGIN_HEADERS},
            )
        response = RedirectResponse(LOGIN_PATH, status_code=303, headers=_LOGIN_HEADERS)
        response.set_cookie(COOKIE, token, path="/", httponly=True, samesite="strict")
        return response


def bearer_is(token: bytes, authorization: str) -> bool:
    """Whether an ``Authorization`` header's value is ``Bearer <token>``."""
    scheme, _, credentials = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        credentials.strip().encode("utf-8", "replace"), token
    )


def is_json(content_type: str) -> bool:
    """Whether a ``Content-Type`` header's value names JSON (parameters aside)."""
    return content_type.partition(";")[0].strip().lower() == "application/json"


def _cookie(headers: Headers) -> str | None:
    for header in headers.getlist("cookie"):
        for pair in header.split(";"):
            name, sep, value = pair.strip().partition("=")
            if sep and name == COOKIE:
                return value.strip().strip('"')
    return None


def _same_origin(headers: Headers) -> bool:
    """The ``Origin`` names the host and port this request was sent to.

    The scheme is left out: behind a TLS proxy the page is https while the
    hub is reached over http."""
    origin = headers.get("origin")
    host = headers.get("host")
    if not origin or not host or origin == "null":
        return False
    netloc = urllib.parse.urlsplit(origin).netloc
    return bool(netloc) and netloc.lower() == host.lower()


def _check_content_type(headers: Headers) -> None:
    has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
    if not has_body:
        return
    media_type = headers.get("content-type", "")
    if not is_json(media_type):
        media_type = media_type.partition(";")[0].strip().lower()
        raise UnsupportedMediaType(
            f"a request body must be 'application/json', not {media_type or 'unlabelled'!r}"
        )
