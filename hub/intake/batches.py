"""Mails in batches, whichever door they came by: ``POST /mail/batch``, the
NATS ingress's batches and the recipients of one SMTP message all go through
:func:`accept_mails`, one ``Acceptor.accept_many`` call, so one transaction:
its mails are accepted in their order, each as one ``POST /mail`` would be,
and none is accepted when the transaction fails."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from runtime.wire import IngressMail, MailAuth, MailContext

from .._errors import HubError, InvalidRequest
from ..store import WITH_OTHERS, Receipt, Rejected, Trigger
from .digests import digest_of, with_digest
from .group_commit import Acceptor
from .mails import mail_trigger

MAX_BATCH: Final = 500
"""Mails per batch (``POST /mail/batch``, an ingress batch, an SMTP message's recipients)."""


async def accept_mails(
    acceptor: Acceptor,
    mails: Sequence[IngressMail | HubError],
    *,
    max_body: int,
    whole: bool = False,
    raw: bytes | None = None,
    auth: MailAuth | None = None,
) -> list[Receipt | HubError]:
    """``POST /mail/batch`` for decoded mails (or the error a mail failed to
        decode with): one outcome per mail, in order, each what ``POST /mail``
        would have answered; the valid mails accepted in their order in one
        transaction. Raises a HubError when the batch is refused whole: not 1 to
        ``MAX_BATCH`` mails, or the transaction failed (nothing accepted).

        With ``whole``, all of them or none (``Acceptor.accept_many``): a mail
        that is invalid stops the others too. ``raw``, the message they were all
        made of (SMTP), goes with each of them for the handler's ``item.raw``, and
    ``auth``, its sender's verdicts, into each one's context (``item.auth``)."""
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
            if auth is not None:
                context = msgspec.structs.replace(trigger.context or MailContext(), auth=auth)
                trigger = msgspec.structs.replace(trigger, context=context)
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
