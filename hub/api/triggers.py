"""The routes that hand a run something to process: a mail (``POST /mail``)
and a signal (``POST /runs/{id}/signals``).

Both end in the one accept function (through the acceptor), so a signal has
what a mail has: message id idempotency, seq order with the run's other
items, and the same receipt.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import InvalidMail, InvalidSignal
from ..store import deployment_of_run
from .context import RouteContext
from .requests import MailIn, SignalIn, mail_trigger, signal_trigger


def trigger_routes(ctx: RouteContext) -> list[Route]:
    async def post_mail(request: Request) -> Response:
        mail = await ctx.read(request, MailIn, InvalidMail)
        return await ctx.accept(mail_trigger(mail, max_body=ctx.settings.max_body))

    async def post_signal(request: Request) -> Response:
        run_id = str(request.path_params["id"])
        # 404 for an unknown run before the body is read; whether the run
        # still takes items (live, its deployment not deleted) is decided
        # inside the accepting transaction, like any trigger's.
        deployment_id = await deployment_of_run(ctx.store.db, run_id)
        signal = await ctx.read(request, SignalIn, InvalidSignal)
        trigger = signal_trigger(
            signal, run_id=run_id, deployment_id=deployment_id, max_body=ctx.settings.max_body
        )
        return await ctx.accept(trigger)

    return [
        Route("/mail", post_mail, methods=["POST"]),
        Route("/runs/{id}/signals", post_signal, methods=["POST"]),
    ]
