"""The sidecar's spans of a mail's trace: the delivery's ``process``, then
``mailrun.handler`` and its children (``mailrun.step``, ``mailrun.send``,
``mailrun.spawn``), each a carrier for the event that goes back to the hub
(docs/tracing.md)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from ._context import (
    DEPLOYMENT,
    DISPATCH,
    RUN,
    Carrier,
    Item,
    carrier,
    context_of,
    dispatches,
    domain,
    ids,
    light,
    messaging,
    sampled,
)
from ._sdk import TRACING


@contextmanager
def receiving(subject: str, items: Sequence[Item]) -> Iterator[None]:
    """Delivered frames stored in the inbox: a consumer span for each
    dispatch whose frame carries a context; its handler continues it."""
    spans = []
    for item in items:
        context = context_of(item.trace)
        if context is None:
            continue
        if not sampled(context):
            dispatches.put(item.dispatch_id, context)
            continue
        span = TRACING.tracer.start_span(
            f"process {subject}",
            context=context,
            kind=SpanKind.CONSUMER,
            attributes=messaging(subject, "process", **ids(item)),
        )
        dispatches.put(item.dispatch_id, light(trace.set_span_in_context(span)))
        spans.append(span)
    try:
        yield
    finally:
        for span in spans:
            span.end()


@contextmanager
def handling(deployment_id: str, run_id: str, dispatch_id: str) -> Iterator[Carrier]:
    """A handler's call on one item: the current span while it runs (its
    steps, sends and spawns are its children, and so are a workflow's own
    spans); yields the carrier its DispatchProcessed event takes."""
    context = dispatches.pop(dispatch_id)
    if context is not None and not sampled(context):
        token = otel_context.attach(context)  # a workflow's own spans follow the decision
        try:
            yield carrier()
        finally:
            otel_context.detach(token)
        return
    attributes = {DEPLOYMENT: deployment_id, RUN: run_id, DISPATCH: dispatch_id}
    with TRACING.tracer.start_as_current_span(
        "mailrun.handler", context=context, attributes=attributes
    ):
        yield carrier()


@contextmanager
def step(name: str) -> Iterator[Span]:
    """One ``ctx.step``."""
    if not sampled(None):
        yield trace.INVALID_SPAN
        return
    with TRACING.tracer.start_as_current_span(
        "mailrun.step", attributes={"mailrun.step": name}
    ) as span:
        yield span


def sent(to: str) -> Carrier:
    """One ``ctx.send``: a span of its own, whose carrier the MailSent event takes."""
    if not sampled(None):
        return carrier()
    with TRACING.tracer.start_as_current_span(
        "mailrun.send", kind=SpanKind.PRODUCER, attributes={"mailrun.recipient.domain": domain(to)}
    ):
        return carrier()


def spawned(entrypoint: str, child_run_id: str) -> Carrier:
    """One ``ctx.spawn``: the span the child's trace links to."""
    if not sampled(None):
        return {}
    attributes = {"mailrun.entrypoint": entrypoint, "mailrun.child_run.id": child_run_id}
    with TRACING.tracer.start_as_current_span("mailrun.spawn", attributes=attributes):
        return carrier()
