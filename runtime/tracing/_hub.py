"""The hub's spans of a mail's trace: its arrival (``POST /mail``, SMTP
DATA, a batch of the NATS ingress), ``mailrun.accept``, the dispatcher's
``send``, the events' ``process`` and ``mailrun.relay``; and the contexts
the hub keeps between them (docs/tracing.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from ._context import (
    DEPLOYMENT,
    RUN,
    Context,
    Item,
    carrier,
    children,
    context_of,
    dispatches,
    domain,
    ids,
    light,
    messaging,
    outgoing,
    sampled,
)
from ._sdk import TRACING


async def http_server(
    method: str, route: str, answer: Awaitable[tuple[int, bytes]]
) -> tuple[int, bytes]:
    """``answer`` under an HTTP server span (``POST /mail``)."""
    attributes = {"http.request.method": method, "url.path": route, "http.route": route}
    with TRACING.tracer.start_as_current_span(
        f"{method} {route}", kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        status, body = await answer
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        return status, body


@contextmanager
def smtp_ingress(peer: str | None, recipients: int) -> Iterator[Span]:
    """One message over SMTP (its DATA), for all its recipients."""
    attributes: dict[str, Any] = {"mailrun.smtp.recipients": recipients}
    attributes["network.peer.address"] = peer or ""
    with TRACING.tracer.start_as_current_span(
        "mailrun.smtp DATA", kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


@contextmanager
def nats_ingress(subject: str, producer: str, mails: int) -> Iterator[Span]:
    """One batch of the NATS mail ingress, processed."""
    attributes = messaging(
        subject, "process", **{"messaging.batch.message_count": mails, "mailrun.producer": producer}
    )
    with TRACING.tracer.start_as_current_span(
        f"process {subject}", kind=SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield span


@contextmanager
def accepting(triggers: int) -> Iterator[Span]:
    """Triggers on their way into the store (``Acceptor.accept_many``)."""
    if not sampled(None):
        yield trace.INVALID_SPAN
        return
    with TRACING.tracer.start_as_current_span(
        "mailrun.accept", attributes={"mailrun.triggers": triggers}
    ) as span:
        yield span


def keep_accepted(context: object, dispatch_ids: Iterable[str]) -> None:
    """Each accepted dispatch continues ``context`` (a :func:`current`) when it is sent."""
    kept = light(cast(Context, context))
    for dispatch_id in dispatch_ids:
        dispatches.put(dispatch_id, kept)


def keep_sent(headers: Mapping[str, str], dispatch_id: str | None, message_id: str | None) -> None:
    """A mail a run sent (its ``mailrun.send`` carrier): the dispatch it
    became here, or the Message-ID it leaves with, continues it."""
    context = context_of(headers)
    if context is None:
        return
    if dispatch_id is not None:
        dispatches.put(dispatch_id, context)
    if message_id is not None:
        outgoing.put(message_id, context)


def keep_child(headers: Mapping[str, str], child_run_id: str) -> None:
    """A child run started by a ``mailrun.spawn``: its trace links to it."""
    context = context_of(headers)
    if context is not None:
        children.put(child_run_id, context)


@contextmanager
def sending(subject: str, items: Sequence[Item]) -> Iterator[None]:
    """A request of the hub's dispatcher: a producer span per dispatch, in
    its own trace, each carried in its frame's ``trace``, ended when the
    answer came. A child run's first item starts a trace linked to the
    spawn that started it."""
    spans = []
    for item in items:
        # Taken by the first send: a dispatch sent again goes without.
        parent = dispatches.pop(item.dispatch_id)
        link = children.pop(item.run_id or "") if item.kind == "start" else None
        if parent is None and link is None:
            continue
        if link is None and not sampled(parent):
            item.trace = carrier(parent)
            continue
        span = TRACING.tracer.start_span(
            f"send {subject}",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes=messaging(subject, "send", **ids(item)),
            links=[Link(trace.get_current_span(link).get_span_context())] if link else None,
        )
        item.trace = carrier(trace.set_span_in_context(span))
        spans.append(span)
    try:
        yield
    finally:
        for span in spans:
            span.end()


@contextmanager
def ingesting(subject: str, deployment_id: str, events: Iterable[object]) -> Iterator[None]:
    """A RunEvents frame applied: a consumer span for each event that
    carries a context, in that event's trace."""
    spans = []
    for event in events:
        headers: Mapping[str, str] | None = getattr(event, "trace", None)
        context = context_of(headers)
        if context is None or not sampled(context):
            continue
        attributes = messaging(subject, "process", **{DEPLOYMENT: deployment_id})
        attributes[RUN] = getattr(event, "run_id", "")
        attributes["mailrun.event"] = type(event).__name__
        spans.append(
            TRACING.tracer.start_span(
                f"process {subject}", context=context, kind=SpanKind.CONSUMER, attributes=attributes
            )
        )
    try:
        yield
    finally:
        for span in spans:
            span.end()


@contextmanager
def relaying(message_id: str, recipient: str) -> Iterator[Span]:
    """One mail handed to the SMTP relay, in the trace of the send that made it."""
    context = outgoing.pop(message_id)
    if context is not None and not sampled(context):
        yield trace.INVALID_SPAN
        return
    attributes = {"mailrun.message_id": message_id, "mailrun.recipient.domain": domain(recipient)}
    with TRACING.tracer.start_as_current_span(
        "mailrun.relay",
        context=context,
        kind=SpanKind.CLIENT,
        attributes=attributes,
    ) as span:
        yield span
