"""The hub's mail rules, played by the kit: the message a sent mail becomes,
the run a reply finds, and the bounce of a sent mail.

As docs/smtp.md states them: a mail whose In-Reply-To (else the newest of
its References) names a Message-ID a run sent goes to that run, a child
included, with ``routed_by = "headers"`` when that is not the top-level
run; to a run that has ended, the deployment's ``replies_to_ended`` says
(the top-level run, or refused). A bounce is a ``bounce`` item to the run
that sent the mail, one per sent mail, its body a :class:`BounceReport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from runtime.wire import (
    BOUNCE_KIND,
    REPLIES_TO_ENDED,
    ROUTED_BY_HEADERS,
    BounceReport,
    MailContext,
    MailSent,
)

from ..execution import MailAuth, mail_domain, wire_auth
from ._errors import KitError, RunEnded, UnknownMail
from ._views import Delivered, RunView, SentMail


class _Hub(Protocol):
    """What the mail room uses of the kit's hub (``KitHub``)."""

    top: str | None
    runs: dict[str, RunView]
    sent: list[SentMail]

    def accept(
        self,
        *,
        kind: str,
        run_id: str | None = None,
        message_id: str | None = None,
        sender: str | None = None,
        subject: str = "",
        body: bytes = b"",
        force: bool = False,
        context: MailContext | None = None,
    ) -> Delivered: ...


def sent_mail(run_id: str, event: MailSent, address: str) -> SentMail:
    """A committed ``ctx.send`` as the hub hands it to its relay."""
    header_id = event.header_id or f"<{event.event_id}@{mail_domain(address)}>"
    headers = {"From": address, "To": event.to}
    if event.cc:
        headers["Cc"] = ", ".join(event.cc)
    headers |= {"Subject": event.subject, "Message-ID": header_id}
    if event.reply_to:
        headers["Reply-To"] = event.reply_to
    if event.in_reply_to:
        headers["In-Reply-To"] = event.in_reply_to
    if event.references:
        headers["References"] = " ".join(event.references)
    headers |= event.headers
    return SentMail(
        run_id=run_id,
        to=event.to,
        subject=event.subject,
        body=event.body,
        message_id=event.message_id or event.event_id,
        headers=headers,
        internal=base(event.to) == base(address),
        header_id=header_id,
        html=event.html,
        cc=list(event.cc),
        reply_to=event.reply_to,
        in_reply_to=event.in_reply_to,
        references=list(event.references),
        attachments=list(event.attachments),
    )


def base(address: str) -> str:
    """``name+tag@domain`` as ``name@domain`` (lower case): the address the gates check."""
    local, _, domain = address.lower().rpartition("@")
    return f"{local.partition('+')[0]}@{domain}"


def tag_of(address: str) -> str | None:
    """What follows the ``+`` of the address's name (None: nothing does)."""
    _, plus, tag = address.rpartition("@")[0].partition("+")
    return tag if plus else None


def tagged(address: str, tag: str | None) -> str:
    if tag is None:
        return address
    local, _, domain = address.rpartition("@")
    return f"{local}+{tag}@{domain}"


def thread_of(in_reply_to: str | None, references: Sequence[str]) -> list[str]:
    """The Message-IDs of a mail's thread, oldest first, each once."""
    thread = list(dict.fromkeys(references))
    if in_reply_to is not None and in_reply_to not in thread:
        thread.append(in_reply_to)
    return thread


class MailRoom:
    """Mail into one kit's hub: to the deployment's address (a tag, sender
    checks), or a reply found by its headers; and bounces of sent mail."""

    def __init__(self, hub: _Hub, replies_to_ended: str = "top_level") -> None:
        if replies_to_ended not in REPLIES_TO_ENDED:
            raise ValueError(f"replies_to_ended is one of {REPLIES_TO_ENDED}")
        self.hub = hub
        self.replies_to_ended = replies_to_ended

    def find(self, mail: str | SentMail) -> SentMail:
        """A sent mail by what ``ctx.send`` returned (or the mail itself)."""
        if isinstance(mail, SentMail):
            return mail
        for sent in self.hub.sent:
            if mail in (sent.header_id, sent.message_id):
                return sent
        raise UnknownMail(f"no run of this test sent a mail {mail!r}")

    def deliver(
        self,
        *,
        run: str | None,
        to: str,
        tag: str | None,
        auth: MailAuth | None,
        in_reply_to: str | None,
        references: Sequence[str],
        message_id: str | None,
        sender: str | None,
        subject: str,
        body: bytes,
    ) -> Delivered:
        """One mail accepted as the hub routes it: to ``run`` when given,
        else to the run its headers answer, else to the top-level run."""
        routed_by = ""
        if run is None:
            run, routed_by = self._answered(in_reply_to, references)
        context = MailContext(
            to=tagged(to, tag),
            tag=tag,
            in_reply_to=in_reply_to,
            thread=thread_of(in_reply_to, references),
            routed_by=routed_by,
            auth=wire_auth(auth),
        )
        return self.hub.accept(
            kind="mail",
            run_id=run,
            message_id=message_id,
            sender=sender,
            subject=subject,
            body=body,
            context=context,
        )

    def _answered(
        self, in_reply_to: str | None, references: Sequence[str]
    ) -> tuple[str | None, str]:
        named = ([in_reply_to] if in_reply_to else []) + list(reversed(references))
        by_id = {m.header_id: m for m in self.hub.sent}
        sent = next((by_id[i] for i in named if i in by_id), None)
        if sent is None:
            return None, ""
        view = self.hub.runs[sent.run_id]
        if view.ended:
            if self.replies_to_ended == "refuse":
                raise RunEnded(f"run {view.run_id} that sent {sent.header_id} has {view.status}")
            return None, ""
        return view.run_id, ROUTED_BY_HEADERS if view.run_id != self.hub.top else ""

    def bounce(
        self,
        mail: str | SentMail,
        *,
        status: str,
        diagnostic: str,
        recipient: str | None,
        source: str,
        at: float,
    ) -> Delivered:
        """A ``bounce`` item to the run that sent ``mail``: once per mail."""
        sent = self.find(mail)
        if sent.internal:
            raise KitError(
                f"{sent.header_id} went to the deployment's own address: it cannot bounce"
            )
        report = BounceReport(
            message_id=sent.header_id,
            recipient=recipient or sent.to,
            status=status,
            diagnostic=diagnostic,
            source=source,
            bounced_at=at,
        )
        return self.hub.accept(
            kind=BOUNCE_KIND,
            run_id=sent.run_id,
            message_id=f"bounce:{sent.message_id}",
            subject=sent.header_id,
            body=msgspec.json.encode(report),
        )
