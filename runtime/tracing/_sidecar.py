"""The sidecar's spans of a mail's trace: the delivery's ``process``, then
``mailrun.handler`` and its children (``mailrun.step``, ``mailrun.send``,
``mailrun.spawn``), each a carrier for the event that goes back to the hub
(docs/tracing.md). A dispatch whose trace is not sampled runs its handler
under a :class:`~runtime.tracing._quiet.Quiet` trace: none of these hooks
makes a span or builds an attribute then."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

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
from ._quiet import NO_SPAN, Ending, Quiet, Quietly, current_span, quiet_now, quiet_of
from ._sdk import TRACING


def receiving(subject: str, items: Sequence[Item]) -> AbstractContextManager[object]:
    """Delivered frames stored in the inbox: a consumer span for each
    dispatch whose frame carries a context; its handler continues it."""
    spans = []
    for item in items:
        quiet = quiet_of(item.trace)
        if quiet is not None:
            dispatches.put(item.dispatch_id, quiet)
            continue
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
    return Ending(spans) if spans else NO_SPAN


def handling(deployment_id: str, run_id: str, dispatch_id: str) -> AbstractContextManager[Carrier]:
    """A handler's call on one item: the current span while it runs (its
    steps, sends and spawns are its children, and so are a workflow's own
    spans); gives the carrier its DispatchProcessed event takes."""
    context = dispatches.pop(dispatch_id)
    if isinstance(context, Quiet):  # a workflow's own spans follow the decision
        return Quietly(context, context.carrier(), attach=True)
    if context is not None and not sampled(context):
        return _attached(context)
    return _handler(context, {DEPLOYMENT: deployment_id, RUN: run_id, DISPATCH: dispatch_id})


@contextmanager
def _attached(context: otel_context.Context) -> Iterator[Carrier]:
    token = otel_context.attach(context)
    try:
        yield carrier()
    finally:
        otel_context.detach(token)


@contextmanager
def _handler(context: otel_context.Context | None, attributes: dict[str, str]) -> Iterator[Carrier]:
    with current_span(
        TRACING.tracer, "mailrun.handler", context=context, attributes=attributes, attach=True
    ):
        quiet = quiet_now()  # a trace that starts here and is not sampled
        yield carrier() if quiet is None else quiet.carrier()


def step(name: str) -> AbstractContextManager[Span]:
    """One ``ctx.step``."""
    if quiet_now() is not None or not sampled(None):
        return NO_SPAN
    return TRACING.tracer.start_as_current_span("mailrun.step", attributes={"mailrun.step": name})


def sent(to: str) -> Carrier:
    """One ``ctx.send``: a span of its own, whose carrier the MailSent event takes."""
    quiet = quiet_now()
    if quiet is not None:
        return quiet.carrier()
    if not sampled(None):
        return carrier()
    with TRACING.tracer.start_as_current_span(
        "mailrun.send", kind=SpanKind.PRODUCER, attributes={"mailrun.recipient.domain": domain(to)}
    ):
        return carrier()


def spawned(entrypoint: str, child_run_id: str) -> Carrier:
    """One ``ctx.spawn``: the span the child's trace links to."""
    if quiet_now() is not None or not sampled(None):
        return {}
    attributes = {"mailrun.entrypoint": entrypoint, "mailrun.child_run.id": child_run_id}
    with TRACING.tracer.start_as_current_span("mailrun.spawn", attributes=attributes):
        return carrier()
