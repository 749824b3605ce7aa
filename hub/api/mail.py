"""``POST /mail`` and ``POST /mail/batch``: :class:`MailAnswers`, answered by
the HTTP server's fast path or by their routes.

Mail is most of what the hub is asked, and through Starlette's stack a
``POST /mail`` cost more CPU than accepting the mail: middleware wrapping
``send`` twice over, the router trying its patterns in turn, a ``Request``
and a ``Response`` object (docs/performance.md). So the server asks
:meth:`MailAnswers.takes` about each POST's head and answers what it takes
with no ASGI cycle at all: one of the two paths, a declared length within
the request limit, no chunked body, ``Expect`` or ``Upgrade``, and the
gate's decision (``auth.Gate``) "admin", which is what every client of the
API sends. Everything else goes through the app, where the same gate
answers the refusals and the routes (:meth:`MailAnswers.routes`) answer
the rest with the same bodies and statuses (``triggers.post_mail``,
``triggers.post_batch``); a bug answers 500 ``internal_error`` and its
traceback goes to the log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runtime import tracing
from runtime.wire import IngressMail as MailIn

from .._errors import BodyTimeout, HubError, InvalidMail, InvalidRequest
from ..intake import MailBatchIn
from .auth import ADMIN, Gate
from .context import RouteContext, receipt_status
from .http import BODY_ARRIVED_EXTENSION
from .requests import decode_json, read_body
from .responses import INTERNAL, error_body
from .routes import post_batch, post_mail

log = logging.getLogger("mailrun.hub.http")

# Headers that send a request the long way: their rules are the app's
# (a chunked body, 100-continue, an upgrade), or a repeated length.
_THE_LONG_WAY = frozenset({b"transfer-encoding", b"expect", b"upgrade"})

Answer = tuple[int, bytes]


class MailAnswers:
    """What ``POST /mail`` and ``POST /mail/batch`` answer (a status and a
    JSON body): the server's ``FastPath``, and the two routes."""

    def __init__(self, ctx: RouteContext, *, gate: Gate) -> None:
        self._ctx = ctx
        self._gate = gate
        self.body_timeout = ctx.settings.body_timeout
        self._answers: dict[str, Callable[[bytes], Awaitable[Answer]]] = {
            "/mail": self._mail,
            "/mail/batch": self._batch,
        }
        self._targets = {path.encode("ascii"): path for path in self._answers}

    def takes(self, target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
        """The path of a POST (its request target and lowercased headers) that
        the HTTP server may answer itself; None: the app answers it."""
        path = self._targets.get(target)
        if path is None:
            return None
        length = None
        for name, value in headers:
            if name == b"content-length":
                if length is not None:
                    return None
                length = value
            elif name in _THE_LONG_WAY:
                return None
        if length is None or not length.isdigit() or not 0 < int(length) <= self._limit():
            return None
        return path if self._gate.decide("POST", path, b"", headers) is ADMIN else None

    async def answer(self, path: str, raw: bytes) -> Answer:
        """The answer to ``raw``, a whole request body POSTed to ``path``."""
        if tracing.on:
            return await tracing.spans.http_server("POST", path, self._answer(path, raw))
        return await self._answer(path, raw)

    async def _answer(self, path: str, raw: bytes) -> Answer:
        try:
            return await self._answers[path](raw)
        except HubError as exc:
            return exc.http_status, error_body(exc)
        except Exception:
            log.exception("POST %s failed", path)
            return 500, error_body(HubError(INTERNAL))

    def late(self) -> Answer:
        """The answer to a request whose body did not arrive in time."""
        late = BodyTimeout(f"the request body did not arrive within {self.body_timeout:g} s")
        return late.http_status, error_body(late)

    def routes(self) -> list[Route]:
        """The two paths as routes of the app, for what the server did not take."""
        return [Route(path, self._route, methods=["POST"]) for path in self._answers]

    async def _route(self, request: Request) -> Response:
        status, body = await self.answer(request.scope["path"], await self._body(request))
        return Response(body, status, media_type="application/json")

    async def _body(self, request: Request) -> bytes:
        timeout: float | None = self.body_timeout
        arrived = request.scope.get("extensions", {}).get(BODY_ARRIVED_EXTENSION)
        if arrived is not None and arrived():
            # All of it is here, so reading it cannot wait: no deadline to keep.
            timeout = None
        declared = request.headers.get("content-length")
        return await read_body(request.stream(), declared, limit=self._limit(), timeout=timeout)

    def _limit(self) -> int:
        return self._ctx.request_limit

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
