"""The producers' client of the NATS mail ingress (docs/hub.md, "Mail ingress").

A producer is added by an operator (``mailrun producer add NAME``, which
prints its id and the seed of its NATS identity once). With those, a
program inside the cluster sends mail in batches of up to 500::

    async with IngressClient.connect(
        "nats://nats:4222", producer_id="prd_...", seed="SU..."
    ) as client:
        receipts = await client.send(
            [ingress_mail("orders@mailrun.local", "order 1", b"...", message_id="o-1")]
        )

One receipt per mail, in order, as ``POST /mail/batch`` answers them
(``IngressReceipt``: ``status`` accepted, rejected or error). Give every
mail a message id: a batch that got no answer (:class:`IngressUnavailable`)
may have been accepted, and sent again it gets the same receipts, marked
``duplicate``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Self

import msgspec

from runtime import (
    WIRE_MAX_PAYLOAD,
    FrameDecodeError,
    FrameDecoder,
    Refused,
    Subjects,
    Transport,
    TransportError,
    encode,
    open_nats,
)
from runtime.config import DEFAULT_SUBJECT_PREFIX
from runtime.wire import IngressBatch, IngressMail, IngressReceipt, IngressReceipts

from ._errors import IngressError, IngressRefused, IngressUnavailable, PayloadTooLarge

_mail = msgspec.msgpack.Encoder()
_reply: FrameDecoder[IngressReceipts | Refused] = FrameDecoder(IngressReceipts | Refused)


def ingress_mail(
    to: str,
    subject: str = "",
    body: bytes | str = b"",
    *,
    message_id: str | None = None,
    sender: str | None = None,
) -> IngressMail:
    """One mail; a body that is not UTF-8 text travels as base64, as the HTTP
    client sends it."""
    if isinstance(body, bytes):
        try:
            text: str | None = body.decode("utf-8")
        except UnicodeDecodeError:
            return IngressMail(
                to=to,
                subject=subject,
                body_b64=base64.b64encode(body).decode("ascii"),
                message_id=message_id,
                sender=sender,
            )
    else:
        text = body
    return IngressMail(to=to, subject=subject, body=text, message_id=message_id, sender=sender)


class IngressClient:
    """Sends batches of mail on one producer's ingress subject."""

    def __init__(
        self,
        transport: Transport,
        producer_id: str,
        *,
        subject_prefix: str = DEFAULT_SUBJECT_PREFIX,
        timeout: float = 10.0,
    ) -> None:
        self._transport = transport
        self.subject = Subjects(subject_prefix).ingress(producer_id)
        self.timeout = timeout

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        url: str,
        *,
        producer_id: str,
        seed: str,
        subject_prefix: str = DEFAULT_SUBJECT_PREFIX,
        timeout: float = 10.0,
        backoff_max: float | None = None,
    ) -> AsyncIterator[Self]:
        """Connect as the producer (its nkey ``seed``), with replies in its own
        inbox. Waits for the server, and for it to admit the identity (a new
        producer is admitted at the server's next reload), as long as it
        takes: cancel the surrounding scope to give up."""
        async with open_nats(
            url,
            name=f"mailrun-producer-{producer_id}",
            seed=seed,
            inbox_prefix=Subjects.inbox_prefix(producer_id),
            backoff_max=backoff_max,
        ) as transport:
            yield cls(transport, producer_id, subject_prefix=subject_prefix, timeout=timeout)

    async def send(self, mails: Sequence[IngressMail]) -> list[IngressReceipt]:
        """Send one batch (1 to 500 mails); one receipt per mail, in order.

        Raises :class:`IngressRefused` when the hub refuses the batch whole,
        :class:`IngressUnavailable` when no answer came (send it again),
        ``PayloadTooLarge`` when the batch does not fit one NATS message."""
        data = encode(IngressBatch(mails=[msgspec.Raw(_mail.encode(m)) for m in mails]))
        if len(data) > WIRE_MAX_PAYLOAD:
            raise PayloadTooLarge(
                f"a batch of {len(data)} bytes exceeds a NATS message ({WIRE_MAX_PAYLOAD}):"
                " send fewer mails at once"
            )
        try:
            answer = await self._transport.request(self.subject, data, self.timeout)
        except TransportError as exc:
            raise IngressUnavailable(f"no answer on {self.subject}: {exc}") from exc
        try:
            reply = _reply.decode(answer)
        except FrameDecodeError as exc:
            raise IngressError(f"an answer that is not a receipt list: {exc}") from exc
        if isinstance(reply, Refused):
            raise IngressRefused(reply.reason, reply.detail)
        if len(reply.receipts) != len(mails):
            raise IngressError(f"{len(reply.receipts)} receipts for {len(mails)} mails")
        return reply.receipts
