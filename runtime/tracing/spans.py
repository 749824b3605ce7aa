"""The spans of a mail's trace, as hub and sidecar make them: loaded only
when tracing is on (it imports opentelemetry), called from one-line hooks.

One trace per mail: its arrival (``POST /mail``, SMTP, the NATS ingress) ->
``mailrun.accept`` -> the hub's ``send mail.inbound.<dep>`` -> the sidecar's
``process mail.inbound.<dep>`` -> ``mailrun.handler`` (its
``mailrun.step``, ``mailrun.send`` and ``mailrun.spawn`` children) -> the
hub's ``process hub.events`` and, for a sent mail leaving, ``mailrun.relay``.
A context crosses processes as a W3C ``traceparent``/``tracestate`` carrier
in the frames' and events' ``trace`` field; inside a process it waits in a
bounded :class:`~runtime.tracing.Kept` (docs/tracing.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import Any, Protocol, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ._kept import Kept

__all__ = [
    "DEPLOYMENT",
    "DISPATCH",
    "KIND",
    "RUN",
    "Carrier",
    "Item",
    "accepting",
    "carrier",
    "children",
    "context_of",
    "current",
    "dispatches",
    "handling",
    "http_server",
    "ingesting",
    "keep_accepted",
    "keep_child",
    "keep_sent",
    "nats_ingress",
    "outgoing",
    "provider_from_env",
    "receiving",
    "relaying",
    "sending",
    "sent",
    "service_name",
    "smtp_ingress",
    "spawned",
    "step",
    "stop",
    "use",
]

log = logging.getLogger("mailrun.tracing")

Context = otel_context.Context
Carrier = dict[str, str]

DEPLOYMENT = "mailrun.deployment.id"
RUN = "mailrun.run.id"
DISPATCH = "mailrun.dispatch.id"
KIND = "mailrun.dispatch.kind"

_EXPORTERS = "opentelemetry_traces_exporter"  # the SDK's entry point group
_OTLP = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}

_w3c = TraceContextTextMapPropagator()
_tracer: trace.Tracer = trace.NoOpTracer()
_provider: TracerProvider | None = None

dispatches: Kept[Context] = Kept()
"""Hub: an accepted dispatch's context until it is sent. Sidecar: a stored
dispatch's until its handler runs."""
children: Kept[Context] = Kept()
"""Hub: a child run's id -> the parent's ``mailrun.spawn`` that started it."""
outgoing: Kept[Context] = Kept()
"""Hub: a leaving mail's Message-ID -> the ``mailrun.send`` that sent it."""


# -- setup ------------------------------------------------------------------


def provider_from_env(service: str, environ: Mapping[str, str]) -> TracerProvider:
    """The SDK's TracerProvider with a BatchSpanProcessor for each exporter
    ``OTEL_TRACES_EXPORTER`` names (default ``otlp``, over http/protobuf
    unless ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`` says ``grpc``). Each
    exporter and processor reads its own variables (endpoint, headers,
    ``OTEL_BSP_*``); the resource reads ``OTEL_RESOURCE_ATTRIBUTES`` and
    ``OTEL_SERVICE_NAME``, which overrides ``service``."""
    named = environ.get("OTEL_SERVICE_NAME", "").strip()
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": service}))
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    for name in filter(None, names):
        if name == "none":
            continue
        exporter = _exporter(name, environ)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter | None:
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
    global _tracer, _provider
    _tracer = provider.get_tracer("mailrun")
    _provider = provider
    if global_too:
        trace.set_tracer_provider(provider)
    for kept in (dispatches, children, outgoing):
        kept.clear()


def stop() -> None:
    """Flush and shut the provider down (a clean stop)."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, trace.NoOpTracer()
    if provider is not None:
        provider.force_flush()
        provider.shutdown()


def service_name(provider: TracerProvider) -> str:
    return str(provider.resource.attributes.get("service.name", ""))


# -- carriers ---------------------------------------------------------------


def carrier(context: Context | None = None) -> Carrier:
    """``context`` (the current one by default) as W3C headers."""
    out: Carrier = {}
    _w3c.inject(out, context=context)
    return out


def current() -> Context:
    return otel_context.get_current()


def context_of(headers: Mapping[str, str] | None) -> Context | None:
    """The context a carrier names; None when it names none."""
    if not headers:
        return None
    context = _w3c.extract(headers)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def _light(context: Context) -> Context:
    """``context`` holding only its span's ids: what a kept context needs,
    without the whole ended span (its attributes, its events) it points to."""
    ids = trace.get_current_span(context).get_span_context()
    return trace.set_span_in_context(trace.NonRecordingSpan(ids))


def _sampled(context: Context | None) -> bool:
    """Whether the trace of ``context`` (the current one for None) records.

    A trace its arrival did not sample makes no further span: its context
    travels on as it is, so the rest of the way knows too, at the cost of a
    lookup (with the default parent-based sampler such spans would record
    nothing anyway; making them is most of what a span costs)."""
    return trace.get_current_span(context).get_span_context().trace_flags.sampled


def _messaging(subject: str, operation: str, **more: Any) -> dict[str, Any]:
    return {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        **{k: v for k, v in more.items() if v is not None},
    }


# -- hub: arrival and acceptance --------------------------------------------


async def http_server(
    method: str, route: str, answer: Awaitable[tuple[int, bytes]]
) -> tuple[int, bytes]:
    """``answer`` under an HTTP server span (``POST /mail``)."""
    attributes = {"http.request.method": method, "url.path": route, "http.route": route}
    with _tracer.start_as_current_span(
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
    with _tracer.start_as_current_span(
        "mailrun.smtp DATA", kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


@contextmanager
def nats_ingress(subject: str, producer: str, mails: int) -> Iterator[Span]:
    """One batch of the NATS mail ingress, processed."""
    attributes = _messaging(
        subject, "process", **{"messaging.batch.message_count": mails, "mailrun.producer": producer}
    )
    with _tracer.start_as_current_span(
        f"process {subject}", kind=SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield span


@contextmanager
def accepting(triggers: int) -> Iterator[Span]:
    """Triggers on their way into the store (``Acceptor.accept_many``)."""
    if not _sampled(None):
        yield trace.INVALID_SPAN
        return
    with _tracer.start_as_current_span(
        "mailrun.accept", attributes={"mailrun.triggers": triggers}
    ) as span:
        yield span


def keep_accepted(context: object, dispatch_ids: Iterable[str]) -> None:
    """Each accepted dispatch continues ``context`` (a :func:`current`) when it is sent."""
    light = _light(cast(Context, context))
    for dispatch_id in dispatch_ids:
        dispatches.put(dispatch_id, light)


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


# -- hub: delivery, events, relay -------------------------------------------


class Item(Protocol):
    """What a publish span reads of a MailInbound (and writes: ``trace``)."""

    dispatch_id: str
    deployment_id: str
    run_id: str | None
    kind: str
    trace: dict[str, str]


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
        if link is None and not _sampled(parent):
            item.trace = carrier(parent)
            continue
        span = _tracer.start_span(
            f"send {subject}",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes=_messaging(subject, "send", **_ids(item)),
            links=[Link(trace.get_current_span(link).get_span_context())] if link else None,
        )
        item.trace = carrier(trace.set_span_in_context(span))
        spans.append(span)
    try:
        yield
    finally:
        for span in spans:
            span.end()


def _ids(item: Item) -> dict[str, Any]:
    return {
        "messaging.message.id": item.dispatch_id,
        DISPATCH: item.dispatch_id,
        DEPLOYMENT: item.deployment_id,
        RUN: item.run_id,
        KIND: item.kind,
    }


@contextmanager
def ingesting(subject: str, deployment_id: str, events: Iterable[object]) -> Iterator[None]:
    """A RunEvents frame applied: a consumer span for each event that
    carries a context, in that event's trace."""
    spans = []
    for event in events:
        headers: Mapping[str, str] | None = getattr(event, "trace", None)
        context = context_of(headers)
        if context is None or not _sampled(context):
            continue
        attributes = _messaging(subject, "process", **{DEPLOYMENT: deployment_id})
        attributes[RUN] = getattr(event, "run_id", "")
        attributes["mailrun.event"] = type(event).__name__
        spans.append(
            _tracer.start_span(
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
    if context is not None and not _sampled(context):
        yield trace.INVALID_SPAN
        return
    attributes = {"mailrun.message_id": message_id, "mailrun.recipient.domain": _domain(recipient)}
    with _tracer.start_as_current_span(
        "mailrun.relay",
        context=context,
        kind=SpanKind.CLIENT,
        attributes=attributes,
    ) as span:
        yield span


# -- sidecar ----------------------------------------------------------------


@contextmanager
def receiving(subject: str, items: Sequence[Item]) -> Iterator[None]:
    """Delivered frames stored in the inbox: a consumer span for each
    dispatch whose frame carries a context; its handler continues it."""
    spans = []
    for item in items:
        context = context_of(item.trace)
        if context is None:
            continue
        if not _sampled(context):
            dispatches.put(item.dispatch_id, context)
            continue
        span = _tracer.start_span(
            f"process {subject}",
            context=context,
            kind=SpanKind.CONSUMER,
            attributes=_messaging(subject, "process", **_ids(item)),
        )
        dispatches.put(item.dispatch_id, _light(trace.set_span_in_context(span)))
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
    if context is not None and not _sampled(context):
        token = otel_context.attach(context)  # a workflow's own spans follow the decision
        try:
            yield carrier()
        finally:
            otel_context.detach(token)
        return
    attributes = {DEPLOYMENT: deployment_id, RUN: run_id, DISPATCH: dispatch_id}
    with _tracer.start_as_current_span("mailrun.handler", context=context, attributes=attributes):
        yield carrier()


@contextmanager
def step(name: str) -> Iterator[Span]:
    """One ``ctx.step``."""
    if not _sampled(None):
        yield trace.INVALID_SPAN
        return
    with _tracer.start_as_current_span("mailrun.step", attributes={"mailrun.step": name}) as span:
        yield span


def sent(to: str) -> Carrier:
    """One ``ctx.send``: a span of its own, whose carrier the MailSent event takes."""
    if not _sampled(None):
        return carrier()
    with _tracer.start_as_current_span(
        "mailrun.send", kind=SpanKind.PRODUCER, attributes={"mailrun.recipient.domain": _domain(to)}
    ):
        return carrier()


def spawned(entrypoint: str, child_run_id: str) -> Carrier:
    """One ``ctx.spawn``: the span the child's trace links to."""
    if not _sampled(None):
        return {}
    attributes = {"mailrun.entrypoint": entrypoint, "mailrun.child_run.id": child_run_id}
    with _tracer.start_as_current_span("mailrun.spawn", attributes=attributes):
        return carrier()


def _domain(address: str) -> str:
    """An address's domain: what a span says of whom a mail goes to."""
    return address.rpartition("@")[2].strip().strip(">").lower()
