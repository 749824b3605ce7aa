"""The NATS mail ingress: producers inside the cluster send mail in batches.

A producer sends an IngressBatch on ``<prefix>.ingress.<producer id>`` and
gets IngressReceipts: one receipt or error per mail, in order, with the
semantics of ``POST /mail/batch`` (the batch goes through the same
``hub.intake.accept_mails``: the acceptor, one transaction). A request refused whole gets
Refused: ``unknown_producer``, ``decode_error``, ``invalid_request`` (not
1 to 500 mails), ``store_unavailable``, ``shutting_down``.

Who sent a batch is its subject's last token: the NATS permissions let only
that producer's identity publish there (``hub.natsauth.producer_permissions``),
and the hub serves it only while the producer is active in the store (a
removed one's identity may still connect until the server's next reload).
The answer goes only to a reply subject in that producer's own inbox
(``_INBOX_<producer id>.``): answered anywhere else, a request could make the
hub publish where its sender may not, so such a request is neither served
nor answered.

Requests are served by a bounded number of tasks (``max_in_flight``); past
that the subscription buffers (``max_pending``), then the server drops, and
the producer, with no answer, sends again (its message ids make that safe).
Several hubs on one NATS share the subject as a queue group: each batch is
served once.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from functools import partial

import anyio
import anyio.abc
import msgspec

from runtime import FrameDecoder, Subjects, Transport, TransportError, tracing
from runtime.wire import IngressBatch, IngressMail, IngressReceipt, IngressReceipts

from ..._errors import HubError, InvalidMail, UnknownProducer
from ...intake import Acceptor, accept_mails
from ...store import Receipt, Store, is_active_producer
from ..retention import DeadLetters, Garbage, RetentionConfig
from .serving import serve

log = logging.getLogger("mailrun.hub.ingress")

SOURCE = "ingress"
"""The dead letters' source of what the ingress could not decode; their
sender column names the producer."""


@dataclass(frozen=True)
class IngressConfig:
    max_in_flight: int = 16
    """Batches served at once."""
    max_pending: int = 256
    """Batches the subscription buffers beyond those."""
    queue: str = "mailrun-hub-ingress"
    retention: RetentionConfig = field(default_factory=RetentionConfig)


_batch: FrameDecoder[IngressBatch] = FrameDecoder(IngressBatch)
_mail = msgspec.msgpack.Decoder(IngressMail)


class IngressHandler:
    """Serves one IngressBatch of a producer; raises what is refused whole."""

    def __init__(self, store: Store, acceptor: Acceptor, *, max_body: int) -> None:
        self._store = store
        self._acceptor = acceptor
        self._max_body = max_body

    async def __call__(self, data: bytes, producer: str | None) -> IngressReceipts:
        # Before decoding: a producer that is not (or no longer) one gets
        # nothing served, not even a dead letter kept.
        if producer is None or not await self._store.read(
            partial(is_active_producer, producer_id=producer)
        ):
            raise UnknownProducer(f"no active producer {producer}")
        batch = _batch.decode(data)
        mails = [_decode_mail(raw) for raw in batch.mails]
        with (
            tracing.spans.nats_ingress(f"ingress.{producer}", producer, len(mails))
            if tracing.on
            else tracing.OFF
        ):
            outcomes = await accept_mails(self._acceptor, mails, max_body=self._max_body)
        return IngressReceipts(receipts=[_receipt(outcome) for outcome in outcomes])


def _decode_mail(raw: msgspec.Raw) -> IngressMail | HubError:
    try:
        return _mail.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError included
        return InvalidMail(str(exc))


def _receipt(outcome: Receipt | HubError) -> IngressReceipt:
    """One mail's answer, with the keys ``POST /mail/batch`` gives it."""
    if isinstance(outcome, HubError):
        return IngressReceipt(status=outcome.kind, reason=outcome.reason, detail=outcome.detail)
    return msgspec.convert(msgspec.to_builtins(outcome), IngressReceipt)


async def run_ingress(
    *,
    store: Store,
    transport: Transport,
    subjects: Subjects,
    acceptor: Acceptor,
    max_body: int,
    config: IngressConfig | None = None,
    letters: DeadLetters | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``<prefix>.ingress.*`` until cancelled; ``task_status.started()``
    once the subscription is up. Frames that do not decode go to ``letters``
    (the wire side's, so that ``/metrics`` counts them)."""
    config = config or IngressConfig()
    handler = IngressHandler(store, acceptor, max_body=max_body)
    letters = letters or DeadLetters(config.retention)
    garbage = Garbage(store, letters, config.retention.garbage_bytes)
    sub = await transport.subscribe(
        subjects.ingress(), queue=config.queue, max_pending=config.max_pending
    )
    try:
        await transport.flush()
        task_status.started()
        await serve(garbage, sub, SOURCE, handler, config.max_in_flight, "prd")
    finally:
        shielded = anyio.CancelScope(shield=True)
        with shielded, anyio.move_on_after(2.0), contextlib.suppress(TransportError):
            await sub.unsubscribe()
