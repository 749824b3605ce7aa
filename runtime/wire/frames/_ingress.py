"""Mail ingress: a producer's batch of mails over NATS, and its receipts."""

from __future__ import annotations

import msgspec

from ._format import _Frame


class IngressMail(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One mail of an IngressBatch: the fields, names and rules of one mail
    of ``POST /mail/batch`` (``from`` included), as a msgpack map. A body
    that is not UTF-8 text goes as ``body_b64``."""

    to: str
    subject: str = ""
    body: str | None = None
    body_b64: str | None = None
    message_id: str | None = None
    sender: str | None = msgspec.field(default=None, name="from")
    in_reply_to: str | None = None
    """The Message-ID the mail answers (``<id@host>``): a reply to mail a
    run of the deployment sent goes to that run (docs/smtp.md, "Replies")."""
    references: list[str] = msgspec.field(default_factory=list)
    """The Message-IDs of the thread before it, oldest first."""


class IngressBatch(_Frame, tag=True, kw_only=True):
    """producer -> hub (``<prefix>.ingress.<producer id>``), answered by
    IngressReceipts, or by Refused when the request is refused whole
    (``unknown_producer``, ``invalid_request``: not 1 to 500 mails,
    ``decode_error``, ``store_unavailable``).

    Each item is an encoded IngressMail, decoded on its own: a malformed
    mail is that mail's error, and its batch mates go on, as in
    ``POST /mail/batch``."""

    mails: list[msgspec.Raw]


class IngressReceipt(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One mail's answer, with the keys its receipt or error has in the JSON
    of ``POST /mail/batch``: accepted ``{status, dispatch_id, run_id,
    deployment_id, seq, duplicate}``; rejected or an error ``{status,
    reason, detail}`` (a retry of a mail its run refused adds the first
    receipt's ``dispatch_id``, ``run_id``, ``deployment_id``, ``seq``)."""

    status: str  # "accepted", "rejected" or "error"
    reason: str | None = None
    detail: str | None = None
    dispatch_id: str | None = None
    run_id: str | None = None
    deployment_id: str | None = None
    seq: int | None = None
    duplicate: bool | None = None

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"


class IngressReceipts(_Frame, tag=True, kw_only=True):
    """hub -> producer: one IngressReceipt per mail of the IngressBatch, in order."""

    receipts: list[IngressReceipt]
