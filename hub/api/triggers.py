"""The routes that hand a run something to process: a mail (``POST /mail``),
up to 500 mails (``POST /mail/batch``) and a signal (``POST /runs/{id}/signals``).

All end in the one accept function (through the acceptor), so a signal has
what a mail has: message id idempotency, seq order with the run's other
items, and the same receipt. A batch is one ``accept_triggers`` call, in one
transaction: its mails are accepted in their order, each as one ``POST
/mail`` would be, and none is accepted when the transaction fails.
:func:`accept_mails` is that batch's semantics, which the NATS mail ingress
(``hub.wire.ingress``) shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import HubError, InvalidMail, InvalidRequest, InvalidSignal
from ..store import WITH_OTHERS, Acceptor, Receipt, Rejected, Trigger, deployment_of_run
from .context import RouteContext, digest_of, with_digest
from .requests import MailBatchIn, MailIn, SignalIn, mail_trigger, signal_trigger

MAX_BATCH = 500
"""Mails per ``POST /mail/batch``."""

_mail = msgspec.json.Decoder(MailIn)


def trigger_routes(ctx: RouteContext) -> list[Route]:
    """``POST /runs/{id}/signals``; ``/mail`` and ``/mail/batch`` are
    answered by the mail lane (``lane.py``), ahead of the router."""

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
    return {"receipts": [_error(o) if isinstance(o, HubError) else o for o in outcomes]}


async def accept_mails(
    acceptor: Acceptor,
    mails: Sequence[MailIn | HubError],
    *,
    max_body: int,
    whole: bool = False,
    raw: bytes | None = None,
) -> list[Receipt | HubError]:
    """``POST /mail/batch`` for decoded mails (or the error a mail failed to
    decode with): one outcome per mail, in order, each what ``POST /mail``
    would have answered; the valid mails accepted in their order in one
    transaction. Raises a HubError when the batch is refused whole: not 1 to
    ``MAX_BATCH`` mails, or the transaction failed (nothing accepted).

    With ``whole``, all of them or none (``Acceptor.accept_many``): a mail
    that is invalid stops the others too. ``raw``, the message they were all
    made of (SMTP), goes with each of them for the handler's ``item.raw``."""
    if not 0 < len(mails) <= MAX_BATCH:
        raise InvalidRequest(f"'mails' must hold 1 to {MAX_BATCH} mails")
    outcomes: list[Receipt | HubError | None] = [None] * len(mails)
    triggers: list[tuple[int, Trigger]] = []
    # One digest for every recipient's copy.
    raw_digest = None if raw is None else await digest_of(raw)
    for at, mail in enumerate(mails):
        try:
            if isinstance(mail, HubError):
                raise mail
            trigger = mail_trigger(mail, max_body=max_body)
            if raw is not None:
                trigger = msgspec.structs.replace(trigger, raw=raw, raw_digest=raw_digest)
            trigger = await with_digest(trigger)
        except HubError as exc:
            outcomes[at] = exc
            continue
        triggers.append((at, trigger))
    if whole and len(triggers) < len(mails):
        with_others = Rejected(reason=WITH_OTHERS, detail="not accepted: another mail was invalid")
        for at, _ in triggers:
            outcomes[at] = with_others
    elif triggers:
        accepted = await acceptor.accept_many([t for _, t in triggers], whole=whole)
        for (at, _), outcome in zip(triggers, accepted, strict=True):
            outcomes[at] = outcome
    answered = [o for o in outcomes if o is not None]
    assert len(answered) == len(mails)  # every mail has its outcome
    return answered


def _decode_mail(raw: msgspec.Raw) -> MailIn | HubError:
    try:
        return _mail.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError included
        return InvalidMail(str(exc))


def _error(exc: HubError) -> dict[str, str]:
    """One mail's error, as ``POST /mail`` would have answered it."""
    return {"status": exc.kind, "reason": exc.reason, "detail": exc.detail}
