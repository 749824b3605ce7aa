"""The SDK set up for a process that traces: its TracerProvider, the
exporters the standard variables name, and the tracer every span comes from.

Loaded only when tracing is on, like everything that imports opentelemetry
(``runtime.tracing.spans`` and its modules).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib.metadata import entry_points

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio, Sampler

from ._context import children, dispatches, outgoing
from ._head import Head, provider

log = logging.getLogger("mailrun.tracing")

_EXPORTERS = "opentelemetry_traces_exporter"  # the SDK's entry point group
_OTLP = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}

DEFAULT_RATIO = 0.01
"""The share of traces sampled when the operator names no sampler
(docs/tracing.md, "Sampling"): one mail in a hundred, decided at its arrival."""


class Tracing:
    """The tracer spans come from, the provider behind it (None: none), and
    its roots' decisions when the provider is one ``_head`` made."""

    tracer: trace.Tracer = trace.NoOpTracer()
    provider: TracerProvider | None = None
    head: Head | None = None


TRACING = Tracing()


def provider_from_env(service: str, environ: Mapping[str, str]) -> TracerProvider:
    """The SDK's TracerProvider with a BatchSpanProcessor for each exporter
    ``OTEL_TRACES_EXPORTER`` names (default ``otlp``, over http/protobuf
    unless ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`` says ``grpc``). Each
    exporter and processor reads its own variables (endpoint, headers,
    ``OTEL_BSP_*``), the provider its sampler's (``OTEL_TRACES_SAMPLER``);
    the resource reads ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``,
    which overrides ``service``. With no ``OTEL_TRACES_SAMPLER``, the
    sampler is :func:`default_sampler`."""
    named = environ.get("OTEL_SERVICE_NAME", "").strip()
    resource = Resource.create({} if named else {"service.name": service})
    traced = provider(default_sampler(environ), resource)
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    for name in filter(None, names):
        if name == "none":
            continue
        exporter = _exporter(name, environ)
        if exporter is not None:
            traced.add_span_processor(BatchSpanProcessor(exporter))
    return traced


def default_sampler(environ: Mapping[str, str]) -> Sampler | None:
    """The sampler when the operator names none: ``parentbased_traceidratio``
    at :data:`DEFAULT_RATIO`, or at ``OTEL_TRACES_SAMPLER_ARG`` when that
    alone is set. None when ``OTEL_TRACES_SAMPLER`` is set: the SDK then
    makes exactly the sampler it names (from the process's environment)."""
    if environ.get("OTEL_TRACES_SAMPLER", "").strip():
        return None
    ratio = DEFAULT_RATIO
    arg = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if arg:
        try:
            ratio = float(arg)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            log.warning("OTEL_TRACES_SAMPLER_ARG=%r is no ratio: %g it is", arg, DEFAULT_RATIO)
            ratio = DEFAULT_RATIO
    return ParentBasedTraceIdRatio(ratio)


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter | None:
    """The exporter ``name`` stands for, by the SDK's entry points."""
    if name == "otlp":
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
        )
        name = _OTLP.get(protocol.strip(), name)
    found = list(entry_points(group=_EXPORTERS, name=name))
    if not found:
        log.error("no span exporter %r installed: its spans are not exported", name)
        return None
    exporter: SpanExporter = found[0].load()()
    return exporter


def use(provider: TracerProvider, *, global_too: bool) -> None:
    """Make spans in ``provider`` (also the global provider, for a workflow's
    own spans, unless it is a test's)."""
    TRACING.tracer = provider.get_tracer("mailrun")
    TRACING.provider = provider
    TRACING.head = Head.of(provider)
    if global_too:
        trace.set_tracer_provider(provider)
    for kept in (dispatches, children, outgoing):
        kept.clear()


def stop() -> None:
    """Flush and shut the provider down (a clean stop)."""
    provider, TRACING.provider, TRACING.tracer = TRACING.provider, None, trace.NoOpTracer()
    TRACING.head = None
    if provider is not None:
        provider.force_flush()
        provider.shutdown()


def service_name(provider: TracerProvider) -> str:
    return str(provider.resource.attributes.get("service.name", ""))
