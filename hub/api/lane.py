"""``/mail`` and ``/mail/batch``, answered ahead of the router.

Mail is most of what the hub is asked, and through Starlette's stack a
``POST /mail`` cost more CPU than accepting the mail: an exception
middleware wrapping ``send`` twice over, the router trying its patterns in
turn, a ``Request`` and a ``Response`` object (docs/performance.md).
:class:`MailAnswers` answers the two paths; it is asked in two places:

- by the HTTP protocol itself (``server.py``), with no ASGI cycle at all,
  for a request it takes whole (:meth:`MailAnswers.takes`): a POST to one
  of the two paths with the admin's bearer token, a JSON content type and
  a declared length within the request limit, which is what every client
  of the API sends;
- by :class:`MailLane`, an ASGI middleware behind ``AdminAuth`` (the same
  credentials, the same content-type check) and inside Starlette's
  ``ServerErrorMiddleware``, for every other request to the two paths:
  chunked bodies, ``Expect: 100-continue``, the console's cookie, other
  methods (``405 method_not_allowed``), and the refusals ``AdminAuth``
  answers (a wrong token: 401; another content type: 415).

Both answer what a route would: the same bodies, statuses and errors
(``triggers.post_mail``, ``triggers.post_batch``); a bug answers 500
``internal_error`` and its traceback goes to the log.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import msgspec
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from runtime import IngressMail as MailIn

from .._errors import BodyTimeout, HubError, InvalidMail, InvalidRequest
from ..intake import MailBatchIn
from .auth import bearer_is, is_json
from .context import RouteContext, receipt_status
from .requests import decode_json, read_body
from .server import BODY_ARRIVED_EXTENSION
from .triggers import post_batch, post_mail

log = logging.getLogger("mailrun.hub.http")

_JSON = (b"content-type", b"application/json")
_NOT_ALLOWED = msgspec.json.encode(
    {"status": "error", "reason": "method_not_allowed", "detail": "Method Not Allowed"}
)
# Headers that send a request the long way: their rules are AdminAuth's and
# uvicorn's (a cookie with no token needs its Origin checked).
_THE_LONG_WAY = frozenset({b"transfer-encoding", b"expect", b"upgrade"})

Answer = tuple[int, bytes]


class MailAnswers:
    """What ``POST /mail`` and ``POST /mail/batch`` answer (a status and a JSON body)."""

    def __init__(self, ctx: RouteContext, *, token: str) -> None:
        self._ctx = ctx
        self._token = token.encode("ascii")
        self.body_timeout = ctx.settings.body_timeout
        self.routes: dict[str, Callable[[bytes], Awaitable[Answer]]] = {
            "/mail": self._mail,
            "/mail/batch": self._batch,
        }
        self._targets = {path.encode("ascii"): path for path in self.routes}

    def takes(self, target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
        """The path of a POST (its request target and lowercased headers) that
        the HTTP protocol may answer itself; None: the app answers it.

        Only a request that ``AdminAuth`` would let through on its bearer
        token is taken: anything else, a refusal included, goes the long way
        and is answered as it always was."""
        path = self._targets.get(target)
        if path is None:
            return None
        authorization = content_type = length = None
        for name, value in headers:
            if name == b"authorization":
                authorization, repeated = value, authorization is not None
            elif name == b"content-type":
                content_type, repeated = value, content_type is not None
            elif name == b"content-length":
                length, repeated = value, length is not None
            else:
                repeated = name in _THE_LONG_WAY
            if repeated:
                return None
        if authorization is None or content_type is None or length is None:
            return None
        if not length.isdigit() or not 0 < int(length) <= self._ctx.request_limit:
            return None
        if not is_json(content_type.decode("latin-1")):
            return None
        return path if bearer_is(self._token, authorization.decode("latin-1")) else None

    async def answer(self, path: str, raw: bytes) -> Answer:
        """The answer to ``raw``, a whole request body POSTed to ``path``."""
        try:
            return await self.routes[path](raw)
        except HubError as exc:
            return exc.http_status, _error(exc)
        except Exception:
            log.exception("POST %s failed", path)
            return 500, _error(HubError("the hub failed to answer this request"))

    def late(self) -> Answer:
        """The answer to a request whose body did not arrive in time."""
        late = BodyTimeout(f"the request body did not arrive within {self.body_timeout:g} s")
        return late.http_status, _error(late)

    async def _mail(self, raw: bytes) -> Answer:
        receipt = await post_mail(self._ctx, decode_json(raw, MailIn, InvalidMail))
        return receipt_status(receipt), msgspec.json.encode(receipt)

    async def _batch(self, raw: bytes) -> Answer:
        receipts = await post_batch(self._ctx, decode_json(raw, MailBatchIn, InvalidRequest))
        return 200, msgspec.json.encode(receipts)


def mail_answers(app: Starlette) -> MailAnswers:
    """The answers of an app made by ``create_app``, for its HTTP server."""
    answers: MailAnswers = app.state.mail_answers
    return answers


class MailLane:
    """The ASGI middleware that answers the two paths for what the protocol did not take."""

    def __init__(self, app: ASGIApp, *, answers: MailAnswers) -> None:
        self.app = app
        self._answers = answers
        self._ctx = answers._ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        routed = scope["type"] == "http" and scope["path"] in self._answers.routes
        if not routed:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            status, body = 405, _NOT_ALLOWED
        else:
            try:
                raw = await self._body(scope, receive)
            except HubError as exc:
                status, body = exc.http_status, _error(exc)
            else:
                status, body = await self._answers.answer(scope["path"], raw)
        headers = [(b"content-length", b"%d" % len(body)), _JSON]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        declared = next(
            (
                value.decode("latin-1")
                for name, value in scope["headers"]
                if name == b"content-length"
            ),
            None,
        )
        limit = self._ctx.request_limit
        timeout: float | None = self._answers.body_timeout
        arrived = scope.get("extensions", {}).get(BODY_ARRIVED_EXTENSION)
        if arrived is not None and arrived():
            # All of it is here, so reading it cannot wait: no deadline to keep
            # (a cancel scope and a timer a request were a fifth of the lane).
            timeout = None
        return await read_body(_chunks(receive), declared, limit=limit, timeout=timeout)


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


def _error(exc: HubError) -> bytes:
    return msgspec.json.encode({"status": exc.kind, "reason": exc.reason, "detail": exc.detail})
