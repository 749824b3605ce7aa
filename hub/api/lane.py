"""``/mail`` and ``/mail/batch``, answered ahead of the router.

Mail is most of what the hub is asked, and through Starlette's stack a
``POST /mail`` cost more CPU than accepting the mail: an exception
middleware wrapping ``send`` twice over, the router trying its patterns in
turn, a ``Request`` and a ``Response`` object (docs/performance.md). This
ASGI middleware answers the two paths itself and hands every other request
on.

It sits behind ``AdminAuth`` (the same credentials, the same content-type
check) and inside Starlette's ``ServerErrorMiddleware`` (a bug still
answers 500 ``internal_error``), and answers what a route would: the same
bodies, statuses and errors (``triggers.post_mail``, ``triggers.post_batch``),
``405 method_not_allowed`` to any method but POST.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from .._errors import HubError, InvalidMail, InvalidRequest
from .context import RouteContext, receipt_status
from .requests import MailBatchIn, MailIn, decode_json, read_body
from .server import BODY_ARRIVED_EXTENSION
from .triggers import post_batch, post_mail

_JSON = (b"content-type", b"application/json")
_NOT_ALLOWED = msgspec.json.encode(
    {"status": "error", "reason": "method_not_allowed", "detail": "Method Not Allowed"}
)

Answer = tuple[int, bytes]


class MailLane:
    def __init__(self, app: ASGIApp, *, ctx: RouteContext) -> None:
        self.app = app
        self._ctx = ctx
        self._paths: dict[str, Callable[[bytes], Awaitable[Answer]]] = {
            "/mail": self._mail,
            "/mail/batch": self._batch,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._paths.get(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            status, body = 405, _NOT_ALLOWED
        else:
            try:
                status, body = await route(await self._body(scope, receive))
            except HubError as exc:
                status, body = exc.http_status, _error(exc)
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
        timeout: float | None = self._ctx.settings.body_timeout
        arrived = scope.get("extensions", {}).get(BODY_ARRIVED_EXTENSION)
        if arrived is not None and arrived():
            # All of it is here, so reading it cannot wait: no deadline to keep
            # (a cancel scope and a timer a request were a fifth of the lane).
            timeout = None
        return await read_body(_chunks(receive), declared, limit=limit, timeout=timeout)

    async def _mail(self, raw: bytes) -> Answer:
        receipt = await post_mail(self._ctx, decode_json(raw, MailIn, InvalidMail))
        return receipt_status(receipt), msgspec.json.encode(receipt)

    async def _batch(self, raw: bytes) -> Answer:
        receipts = await post_batch(self._ctx, decode_json(raw, MailBatchIn, InvalidRequest))
        return 200, msgspec.json.encode(receipts)


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
