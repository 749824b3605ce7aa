"""The routes that hand a run something to process: a mail (``POST /mail``),
up to 500 mails (``POST /mail/batch``) and a signal (``POST /runs/{id}/signals``).

All end in the one accept function (through the acceptor), so a signal has
what a mail has: message id idempotency, seq order with the run's other
items, and the same receipt. A batch is one ``accept_triggers`` call, in one
transaction: its mails are accepted in their order, each as one ``POST
/mail`` would be, and none is accepted when the transaction fails.
That batch's semantics are ``hub.intake.accept_mails``, which the NATS mail
ingress and the SMTP ingress share.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runtime.wire import IngressMail as MailIn

from ..._errors import HubError, InvalidMail, InvalidRequest, InvalidSignal
from ...intake import MAX_BATCH, MailBatchIn, accept_mails, mail_trigger, with_digest
from ...store import Receipt, deployment_of_run
from ..context import RouteContext
from ..requests import SignalIn, signal_trigger
from ..responses import error_fields

_mail = msgspec.json.Decoder(MailIn)


def trigger_routes(ctx: RouteContext) -> list[Route]:
    """``POST /runs/{id}/signals``; ``/mail`` and ``/mail/batch`` are
    ``MailAnswers``' (``mail.py``)."""

    async def post_signal(request: Request) -> Response:
        run_id = str(request.path_params["id"])
        # 404 for an unknown run before the body is read; whether the run
        # still takes items (live, its deployment not deleted) is decided
        # inside the accepting transaction, like any trigger's.
        deployment_id = await ctx.store.read(partial(deployment_of_run, run_id=run_id))
        signal = await ctx.read(request, SignalIn, InvalidSignal)
        trigger = signal_trigger(
            signal, run_id=run_id, deployment_id=deployment_id, max_body=ctx.settings.max_body
        )
        return await ctx.accept(trigger)

    return [Route("/runs/{id}/signals", post_signal, methods=["POST"])]


async def post_mail(ctx: RouteContext, mail: MailIn) -> Receipt:
    """``POST /mail``: the mail's receipt; raises the HubError it is refused with."""
    return await ctx.acceptor.accept(
        await with_digest(mail_trigger(mail, max_body=ctx.settings.max_body))
    )


async def post_batch(ctx: RouteContext, batch: MailBatchIn) -> dict[str, list[Any]]:
    """``POST /mail/batch``: ``{"receipts": [...]}``, one per mail in order;
    raises the HubError the batch is refused whole with."""
    if not 0 < len(batch.mails) <= MAX_BATCH:
        raise InvalidRequest(f"'mails' must hold 1 to {MAX_BATCH} mails")
    mails = [_decode_mail(raw) for raw in batch.mails]
    outcomes = await accept_mails(ctx.acceptor, mails, max_body=ctx.settings.max_body)
    return {"receipts": [error_fields(o) if isinstance(o, HubError) else o for o in outcomes]}


def _decode_mail(raw: msgspec.Raw) -> MailIn | HubError:
    try:
        return _mail.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError included
        return InvalidMail(str(exc))
