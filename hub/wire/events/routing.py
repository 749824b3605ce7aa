"""Mail that runs send: a trigger for a deployment here, outgoing mail otherwise.

Mail from a run is accepted by the one accept function, in the events'
transaction, with a message id derived from the dispatch that sent it and
the context any mail has (the recipient's tag, the thread it answers: a
reply to another deployment's mail finds the run that sent it); an address
no deployment holds becomes a row of the outbound relay's table in the same
transaction (docs/hub.md, "Outbound mail").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from runtime import ChildRunStarted, Event, MailSent, Reason, RunStatus, tracing

from ...mailbox import mail_context
from ...store import (
    Accepted,
    OutboundMail,
    OutboundSpec,
    OutboundStatus,
    Rejected,
    Trigger,
    Tx,
    accept_triggers,
    deployment_address,
    record_outbound,
)

log = logging.getLogger("mailrun.hub.events")


def route_mail(
    tx: Tx,
    deployment_id: str,
    sent: list[MailSent],
    outbound: OutboundStatus,
    dead_letter: Callable[[Event, str], None],
) -> tuple[set[str], int]:
    """Accept the new MailSent events addressed to local deployments, and
    record those to addresses no deployment holds as outgoing mail."""
    if not sent:
        return set(), 0
    sender = deployment_address(tx, deployment_id)
    # Mail from a run is a trigger like any other. Its message id comes
    # from the dispatch that sent it (an older sidecar's: the event id),
    # so it is accepted once however often it is sent, even when a new
    # owner processes that dispatch again.
    mail = [_trigger(e, sender) for e in sent]
    outcomes, woken = accept_triggers(tx, mail)
    away: list[OutboundMail] = []
    for event, trigger, outcome in zip(sent, mail, outcomes, strict=True):
        if tracing.on and isinstance(outcome, Accepted) and not outcome.duplicate:
            tracing.spans.keep_sent(event.trace, outcome.dispatch_id, None)
        if isinstance(outcome, Rejected) and outcome.reason == Reason.UNKNOWN_ADDRESS:
            # Nobody here holds it: the mail leaves through the relay,
            # keyed like a local trigger, so a resend is the same mail.
            away.append(
                OutboundMail(
                    deployment_id=deployment_id,
                    run_id=event.run_id,
                    event_id=event.event_id,
                    send_key=trigger.message_id or event.event_id,
                    sender=sender or "",
                    recipient=event.to.strip(),
                    subject=event.subject,
                    body=event.body,
                    header_id=event.header_id,
                    spec=spec_of(event),
                )
            )
            if tracing.on:
                tracing.spans.keep_sent(event.trace, None, away[-1].message_id)
            continue
        if isinstance(outcome, Rejected) and outcome.reason == Reason.MESSAGE_ID_REUSED:
            # Another trigger holds this id: the mail is not delivered, and
            # the event (acknowledged all the same) is kept where an operator looks.
            log.warning("mail event %s: %s", event.event_id, outcome.detail)
            dead_letter(event, outcome.reason)
        elif not isinstance(outcome, Accepted):
            # A deleted deployment's address, or its run ended: the event is the record.
            log.info(
                "mail from %s to %s not delivered here: %s",
                deployment_id,
                trigger.address,
                outcome,
            )
    recorded = record_outbound(tx, away, outbound) if away else 0
    return woken, recorded


def spec_of(event: MailSent) -> OutboundSpec:
    """The rich parts of ``event``'s mail, as its outbound row keeps them."""
    return OutboundSpec(
        html=event.html,
        cc=tuple(event.cc),
        reply_to=event.reply_to,
        in_reply_to=event.in_reply_to,
        references=tuple(event.references),
        headers=dict(event.headers),
        attachments=tuple(event.attachments),
    )


def _trigger(event: MailSent, sender: str | None) -> Trigger:
    address, context = mail_context(event.to, event.in_reply_to, event.references)
    return Trigger(
        address=address.base,
        context=context,
        sender=sender,
        subject=event.subject,
        body=event.body,
        message_id=event.message_id or event.event_id,
    )


def start_item(deployment_id: str, event: ChildRunStarted) -> Trigger:
    """A child run's first item: sent by its parent, its subject the entrypoint,
    its body the spawn's input as JSON."""
    return Trigger(
        deployment_id=deployment_id,
        run_id=event.child_run_id,
        kind="start",
        message_id=f"start:{event.child_run_id}",
        sender=event.run_id,
        subject=event.entrypoint,
        body=msgspec.json.encode(event.input),
    )


def child_item(
    deployment_id: str,
    parent_run_id: str,
    child_run_id: str,
    status: RunStatus,
    result: Any,
    error: str | None,
) -> Trigger:
    """The item a parent gets when its child ended: sent by the child, its
    subject the child's status, its body ``{child_run_id, status, result,
    error}``."""
    body = {"child_run_id": child_run_id, "status": status.value, "result": result}
    body["error"] = error or None
    return Trigger(
        deployment_id=deployment_id,
        run_id=parent_run_id,
        kind="child",
        message_id=f"child:{child_run_id}",
        sender=child_run_id,
        subject=status.value,
        body=msgspec.json.encode(body),
    )
