"""The sampling decision at a trace's root, made before any span: a root the
sampler drops costs a trace id, one call of the sampler and a formatted
``traceparent``, not the SDK's span machinery.

The SDK decides inside ``Tracer.start_span``, and builds a span either way
(a non-recording one when dropped): some 5 µs, most of what a mail nobody
traces would cost the hub. A provider made by :func:`provider` has its
sampler and its id generator wrapped, through the SDK's public extension
points (``Sampler``, ``IdGenerator``); :func:`root` then draws the trace id
and asks the sampler itself. A dropped root becomes a
:class:`~runtime.tracing._quiet.Quiet` trace on the spot; a sampled one is
started by the SDK with that very trace id and decision, handed over in a
context variable, so that the sampler is asked once a root, as the SDK
would ask it. A provider made elsewhere (a test's, given to ``install``)
takes the SDK's own way.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceFlags, TraceState
from opentelemetry.util.types import Attributes

from ._quiet import Quiet, Quietly, current_span

# A root decided by root(), on its way through start_span: its trace id and decision.
_decided: ContextVar[tuple[int, SamplingResult] | None] = ContextVar(
    "mailrun.tracing.head", default=None
)


class _Decided(Sampler):
    """The provider's sampler, but a root :func:`root` decided gets that decision."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        decided = _decided.get()
        if decided is not None and decided[0] == trace_id:
            return decided[1]
        return self.inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return self.inner.get_description()


class _Drawn(IdGenerator):
    """Random ids, but a root :func:`root` decided gets the trace id it was decided on."""

    def __init__(self) -> None:
        self.inner = RandomIdGenerator()

    def generate_span_id(self) -> int:
        return self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        decided = _decided.get()
        return self.inner.generate_trace_id() if decided is None else decided[0]

    def is_trace_id_random(self) -> bool:
        return True


class Head:
    """A provider's root decisions: its sampler and ids, unwrapped."""

    def __init__(self, sampler: Sampler, ids: IdGenerator) -> None:
        self.sampler = sampler
        self.ids = ids

    @classmethod
    def of(cls, provider: TracerProvider) -> Head | None:
        """The head of a provider :func:`provider` made; None for another."""
        sampler, ids = provider.sampler, provider.id_generator
        if isinstance(sampler, _Decided) and isinstance(ids, _Drawn):
            return cls(sampler.inner, ids.inner)
        return None


def provider(sampler: Sampler | None, resource: Resource | None = None) -> TracerProvider:
    """A TracerProvider whose roots :func:`root` decides, with ``sampler``
    (None: the one the SDK makes of ``OTEL_TRACES_SAMPLER``)."""
    resource = resource or Resource.create({})
    if sampler is None:
        sampler = TracerProvider(shutdown_on_exit=False).sampler
    return TracerProvider(sampler=_Decided(sampler), id_generator=_Drawn(), resource=resource)


_ROOT = otel_context.Context()  # a root has no parent, whatever is current
_RANDOM = f"{TraceFlags.RANDOM_TRACE_ID:02x}"  # the flags of a dropped root's traceparent


def root(
    tracer: trace.Tracer,
    head: Head | None,
    name: str,
    kind: SpanKind,
    attributes: dict[str, Any],
) -> AbstractContextManager[trace.Span]:
    """The current span of an arrival, which starts a trace: under ``head``
    a dropped one is a quiet trace before any span is made."""
    if head is None:
        return current_span(tracer, name, context=_ROOT, kind=kind, attributes=attributes)
    trace_id = head.ids.generate_trace_id()
    decision = head.sampler.should_sample(_ROOT, trace_id, name, kind, attributes)
    if decision.decision is Decision.DROP and not decision.trace_state:
        span_id = head.ids.generate_span_id()
        quiet = Quiet(f"00-{trace_id:032x}-{span_id:016x}-{_RANDOM}")
        return Quietly(quiet, trace.INVALID_SPAN)
    token = _decided.set((trace_id, decision))
    try:
        span = tracer.start_span(name, context=_ROOT, kind=kind, attributes=attributes)
    finally:
        _decided.reset(token)
    return trace.use_span(span, end_on_exit=True)
