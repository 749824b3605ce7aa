"""A trace its root did not sample, on its way through the hooks of hub and
sidecar (the same calls, in the same order, as a mail makes them): no span
anywhere, and yet every frame and event carries the trace's real W3C
``traceparent``, not sampled, so that no process after the root starts a
trace of its own; a workflow's own spans under its handler follow the
decision."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from runtime import tracing
from runtime.tracing import spans

SUBJECT = "mailrun.mail.inbound.dep_x"


class WorkflowsOnly(Sampler):
    """A root is sampled only when a workflow starts it (its span ``workflow``)."""

    def should_sample(
        self, parent_context: Any, trace_id: int, name: str, *args: Any, **kw: Any
    ) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE if name == "workflow" else Decision.DROP)

    def get_description(self) -> str:
        return "WorkflowsOnly"


class Frame:
    """A MailInbound, as the hooks see it."""

    def __init__(self, n: int) -> None:
        self.dispatch_id = f"dsp_{n}"
        self.deployment_id = "dep_x"
        self.run_id: str | None = f"run_{n}"
        self.kind = "mail"
        self.trace: dict[str, str] = {}


class Processed:
    def __init__(self, trace: dict[str, str]) -> None:
        self.run_id = "run_x"
        self.trace = trace


@pytest.fixture(params=["head", "sdk"])
def provider(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """Roots decided before their span (``spans.provider``) or by the SDK."""
    sampler = ParentBased(WorkflowsOnly())
    made = spans.provider(sampler) if request.param == "head" else TracerProvider(sampler)
    exporter = InMemorySpanExporter()
    made.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(made)
    try:
        yield made, exporter
    finally:
        tracing.shutdown()


def _w3c(carrier: dict[str, str]) -> trace.SpanContext:
    """The span context the propagator reads in ``carrier``: W3C or nothing."""
    context = TraceContextTextMapPropagator().extract(carrier)
    return trace.get_current_span(context).get_span_context()


def test_a_trace_not_sampled_carries_its_traceparent_and_makes_no_span(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    made, exporter = provider
    frame = Frame(1)
    seen: dict[str, Any] = {}

    async def answer() -> tuple[int, bytes]:
        with spans.accepting(1) as span:
            seen["accept"] = span.is_recording()
            spans.keep_accepted(spans.current(), [frame.dispatch_id])
        return 202, b"{}"

    anyio.run(spans.http_server, "POST", "/mail", answer())
    assert seen["accept"] is False
    with spans.sending(SUBJECT, [frame]):
        pass
    sent = _w3c(frame.trace)
    assert sent.is_valid and sent.is_remote and not sent.trace_flags.sampled
    assert frame.trace["traceparent"].startswith("00-")

    # The sidecar: the delivery, its handler, a step, a mail sent, a spawn.
    with (
        spans.receiving(SUBJECT, [frame]),
        spans.handling(frame.deployment_id, "run_1", frame.dispatch_id) as carrier,
    ):
        with spans.step("count") as step:
            assert not step.is_recording()
        assert spans.sent("someone@example.org") == frame.trace
        assert spans.spawned("flow:main", "run_2") == {}
        # A workflow's own span: its sampler would sample it as a root.
        own = made.get_tracer("workflow").start_span("workflow")
        assert not own.is_recording()
        assert own.get_span_context().trace_id == sent.trace_id
    assert carrier == frame.trace

    # Back on the hub: the handler's event, the sent mail's relay.
    spans.keep_sent(carrier, None, "msg-1")
    with spans.ingesting("mailrun.hub.events.dep_x", "dep_x", [Processed(carrier)]):
        pass
    with spans.relaying("msg-1", "someone@example.org") as relay:
        assert not relay.is_recording()

    assert exporter.get_finished_spans() == ()
    assert len(spans.dispatches) == 0 and len(spans.outgoing) == 0
    # A root the workflow starts itself is still sampled: the sampler works.
    made.get_tracer("workflow").start_span("workflow").end()
    assert [s.name for s in exporter.get_finished_spans()] == ["workflow"]


def test_a_carrier_that_is_not_plain_takes_the_propagators_way(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A not-sampled carrier with a tracestate is not passed on verbatim
    but read and written again: still not sampled, still no span."""
    _, exporter = provider
    frame = Frame(2)
    frame.trace = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        "tracestate": "vendor=x",
    }
    with (
        spans.receiving(SUBJECT, [frame]),
        spans.handling(frame.deployment_id, "run_2", frame.dispatch_id) as carrier,
    ):
        pass
    assert carrier == frame.trace
    assert exporter.get_finished_spans() == ()
