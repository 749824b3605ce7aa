"""The hub's spans of a mail's trace: its arrival (``POST /mail``, SMTP
DATA, a batch of the NATS ingress), ``mailrun.accept``, the dispatcher's
``send``, the events' ``process`` and ``mailrun.relay``; and the contexts
the hub keeps between them (docs/tracing.md). A trace its arrival did not
sample goes on as a :class:`~runtime.tracing._quiet.Quiet` one."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
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
from ._head import root
from ._quiet import NO_SPAN, Ending, Quiet, current_span, quiet_now, quiet_of
from ._sdk import TRACING


async def http_server(
    method: str, route: str, answer: Awaitable[tuple[int, bytes]]
) -> tuple[int, bytes]:
    """``answer`` under an HTTP server span (``POST /mail``)."""
    attributes = {"http.request.method": method, "url.path": route, "http.route": route}
    with root(
        TRACING.tracer, TRACING.head, f"{method} {route}", SpanKind.SERVER, attributes
    ) as span:
        status, body = await answer
        if span.is_recording():
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
        return status, body


def smtp_ingress(peer: str | None, recipients: int) -> AbstractContextManager[Span]:
    """One message over SMTP (its DATA), for all its recipients."""
    attributes: dict[str, Any] = {"mailrun.smtp.recipients": recipients}
    attributes["network.peer.address"] = peer or ""
    return root(TRACING.tracer, TRACING.head, "mailrun.smtp DATA", SpanKind.SERVER, attributes)


def nats_ingress(subject: str, producer: str, mails: int) -> AbstractContextManager[Span]:
    """One batch of the NATS mail ingress, processed."""
    attributes = messaging(
        subject, "process", **{"messaging.batch.message_count": mails, "mailrun.producer": producer}
    )
    return root(TRACING.tracer, TRACING.head, f"process {subject}", SpanKind.CONSUMER, attributes)


def accepting(triggers: int) -> AbstractContextManager[Span]:
    """Triggers on their way into the store (``Acceptor.accept_many``)."""
    if quiet_now() is not None or not sampled(None):
        return NO_SPAN
    # With no arrival (a signal, a decision over HTTP) the trace starts here.
    attributes = {"mailrun.triggers": triggers}
    return current_span(TRACING.tracer, "mailrun.accept", attributes=attributes)


def keep_accepted(context: object, dispatch_ids: Iterable[str]) -> None:
    """Each accepted dispatch continues ``context`` (a :func:`current`) when it is sent."""
    kept = context if isinstance(context, Quiet) else light(cast(Context, context))
    for dispatch_id in dispatch_ids:
        dispatches.put(dispatch_id, kept)


def keep_sent(headers: Mapping[str, str], dispatch_id: str | None, message_id: str | None) -> None:
    """A mail a run sent (its ``mailrun.send`` carrier): the dispatch it
    became here, or the Message-ID it leaves with, continues it."""
    context: Context | Quiet | None = quiet_of(headers) or context_of(headers)
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


def sending(subject: str, items: Sequence[Item]) -> AbstractContextManager[object]:
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
        if isinstance(parent, Quiet):
            if link is None:
                item.trace = parent.carrier()
                continue
            parent = parent.context()
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
    return Ending(spans) if spans else NO_SPAN


def ingesting(
    subject: str, deployment_id: str, events: Iterable[object]
) -> AbstractContextManager[object]:
    """A RunEvents frame applied: a consumer span for each event that
    carries a sampled context, in that event's trace."""
    spans = []
    for event in events:
        headers: Mapping[str, str] | None = getattr(event, "trace", None)
        if not headers or quiet_of(headers) is not None:
            continue
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
    return Ending(spans) if spans else NO_SPAN


def relaying(message_id: str, recipient: str) -> AbstractContextManager[Span]:
    """One mail handed to the SMTP relay, in the trace of the send that made it."""
    context = outgoing.pop(message_id)
    if isinstance(context, Quiet) or (context is not None and not sampled(context)):
        return NO_SPAN
    attributes = {"mailrun.message_id": message_id, "mailrun.recipient.domain": domain(recipient)}
    return current_span(
        TRACING.tracer,
        "mailrun.relay",
        context=context,
        kind=SpanKind.CLIENT,
        attributes=attributes,
    )
