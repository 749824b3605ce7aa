"""A trace its arrival did not sample, carried for the price of its
``traceparent``: what hub and sidecar keep and hand on instead of an
OpenTelemetry context, so that a mail nobody traces costs a few µs.

Most mails are not sampled (docs/tracing.md, "Sampling"), and the "not
sampled" decision must still reach every process the mail goes through, or
a sidecar would start a trace of its own for it. It does, as the real W3C
``traceparent`` of the trace's root (its ids, flags without the sampled
bit), made once at the root and copied verbatim into each frame and event
after it. The SDK would parse that header into a context and format it
back at every hop (some 10 µs a hop); a :class:`Quiet` only checks it.

Inside a process the quiet trace of the code running now is in a context
variable (:class:`Quietly`), where the hooks look first: under it they make
no span and build no attribute. A span that may start a trace goes through
:func:`current_span`, which turns the sampler's "drop" into a quiet trace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace

Carrier = dict[str, str]

# Version 00 exactly, ids not all zero, the flags' sampled bit (0x01) clear:
# any other carrier (a sampled one, a tracestate, a later version) takes the
# propagator's way, which re-formats it; this one passes on as it came.
_NOT_SAMPLED = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f][02468ace]")

_EMPTY = otel_context.Context()
T = TypeVar("T")
_now: ContextVar[Quiet | None] = ContextVar("mailrun.tracing.quiet", default=None)


@dataclass(frozen=True, slots=True)
class Quiet:
    """A not-sampled trace: the W3C carrier every hop of it hands on."""

    traceparent: str

    @classmethod
    def of(cls, span: trace.Span) -> Quiet:
        """The trace of ``span``, a root the sampler dropped."""
        ids = span.get_span_context()
        return cls(f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}")

    def carrier(self) -> Carrier:
        """A fresh carrier for a frame or an event."""
        return {"traceparent": self.traceparent}

    def context(self) -> otel_context.Context:
        """As an OpenTelemetry context, for the SDK: a span under it is not
        sampled either (with a parent-based sampler, the default)."""
        tp = self.traceparent
        ids = trace.SpanContext(
            trace_id=int(tp[3:35], 16),
            span_id=int(tp[36:52], 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(int(tp[53:55], 16)),
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(ids), _EMPTY)


def quiet_of(headers: Mapping[str, str] | None) -> Quiet | None:
    """The not-sampled trace a carrier names; None for any other carrier
    (none, a sampled trace, or one that needs the propagator)."""
    if not headers or len(headers) != 1:
        return None
    traceparent = headers.get("traceparent")
    if traceparent is None or _NOT_SAMPLED.fullmatch(traceparent) is None:
        return None
    return Quiet(traceparent)


class Ending:
    """Spans ended as the body leaves (a dispatcher's request, a frame)."""

    __slots__ = ("_spans",)

    def __init__(self, spans: list[trace.Span]) -> None:
        self._spans = spans

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        for span in self._spans:
            span.end()


NO_SPAN: Final = nullcontext(trace.INVALID_SPAN)
"""What a hook gives when it makes no span: the API's invalid span."""


def quiet_now() -> Quiet | None:
    """The not-sampled trace the code running now belongs to, if any."""
    return _now.get()


class Quietly(Generic[T]):
    """Run the body in ``quiet``'s trace: the hooks inside make no span.
    With ``attach`` also as the OpenTelemetry context, so that spans a
    workflow makes itself follow the decision (the sidecar's handler).
    Entered, it gives ``result``.

    A class, not a generator: it is entered for most mails, and a
    generator's context manager costs a few times more."""

    __slots__ = ("_attach", "_attached", "_quiet", "_result", "_token")

    def __init__(self, quiet: Quiet, result: T, *, attach: bool = False) -> None:
        self._quiet, self._result, self._attach = quiet, result, attach
        self._attached: object = None
        self._token: Token[Quiet | None] | None = None

    def __enter__(self) -> T:
        self._token = _now.set(self._quiet)
        if self._attach:
            self._attached = otel_context.attach(self._quiet.context())
        return self._result

    def __exit__(self, *exc: object) -> None:
        if self._attached is not None:
            otel_context.detach(cast(Token[otel_context.Context], self._attached))
        if self._token is not None:
            _now.reset(self._token)


def current_span(
    tracer: trace.Tracer,
    name: str,
    *,
    context: otel_context.Context | None = None,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
    attach: bool = False,
) -> AbstractContextManager[trace.Span]:
    """``start_as_current_span``, but a span the sampler dropped makes its
    trace quiet (:class:`Quietly`) rather than the OpenTelemetry context
    current: the hooks under it then cost a lookup each."""
    span = tracer.start_span(name, context=context, kind=kind, attributes=attributes)
    # A sampler that gave a dropped trace a tracestate: the propagator's way.
    if span.is_recording() or span.get_span_context().trace_state:
        return trace.use_span(span, end_on_exit=True)
    return Quietly(Quiet.of(span), span, attach=attach)
