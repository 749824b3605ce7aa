"""A trace's context as hub and sidecar hand it on: W3C carriers in and out,
the contexts each process keeps between two spans (a sampled trace's
context, or a :class:`~runtime.tracing._quiet.Quiet` one's carrier), and the
attributes several spans share.

Loaded only when tracing is on (it imports opentelemetry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ._kept import Kept
from ._quiet import Carrier as Carrier
from ._quiet import Quiet, quiet_now

Context = otel_context.Context

DEPLOYMENT = "mailrun.deployment.id"
RUN = "mailrun.run.id"
DISPATCH = "mailrun.dispatch.id"
KIND = "mailrun.dispatch.kind"

_w3c = TraceContextTextMapPropagator()

dispatches: Kept[Context | Quiet] = Kept()
"""Hub: an accepted dispatch's context until it is sent. Sidecar: a stored
dispatch's until its handler runs."""
children: Kept[Context] = Kept()
"""Hub: a child run's id -> the parent's ``mailrun.spawn`` that started it."""
outgoing: Kept[Context | Quiet] = Kept()
"""Hub: a leaving mail's Message-ID -> the ``mailrun.send`` that sent it."""


class Item(Protocol):
    """What the spans of a delivery read of a MailInbound (and write: ``trace``)."""

    dispatch_id: str
    deployment_id: str
    run_id: str | None
    kind: str
    trace: dict[str, str]


def carrier(context: Context | None = None) -> Carrier:
    """``context`` (the current one by default) as W3C headers."""
    out: Carrier = {}
    _w3c.inject(out, context=context)
    return out


def current() -> Context | Quiet:
    """The trace of the code running now: its quiet trace when it has one."""
    return quiet_now() or otel_context.get_current()


def context_of(headers: Mapping[str, str] | None) -> Context | None:
    """The context a carrier names; None when it names none."""
    if not headers:
        return None
    context = _w3c.extract(headers)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def light(context: Context) -> Context:
    """``context`` holding only its span's ids: what a kept context needs,
    without the whole ended span (its attributes, its events) it points to."""
    ids = trace.get_current_span(context).get_span_context()
    return trace.set_span_in_context(trace.NonRecordingSpan(ids))


def sampled(context: Context | None) -> bool:
    """Whether the trace of ``context`` (the current one for None) records.

    A trace its arrival did not sample makes no further span: its context
    travels on as it is, so the rest of the way knows too, at the cost of a
    lookup (with the default parent-based sampler such spans would record
    nothing anyway; making them is most of what a span costs)."""
    return trace.get_current_span(context).get_span_context().trace_flags.sampled


def messaging(subject: str, operation: str, **more: Any) -> dict[str, Any]:
    """The messaging semantic conventions' attributes of a NATS subject."""
    return {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        **{k: v for k, v in more.items() if v is not None},
    }


def ids(item: Item) -> dict[str, Any]:
    """A delivered dispatch's ids, as attributes."""
    return {
        "messaging.message.id": item.dispatch_id,
        DISPATCH: item.dispatch_id,
        DEPLOYMENT: item.deployment_id,
        RUN: item.run_id,
        KIND: item.kind,
    }


def domain(address: str) -> str:
    """An address's domain: what a span says of whom a mail goes to."""
    return address.rpartition("@")[2].strip().strip(">").lower()
