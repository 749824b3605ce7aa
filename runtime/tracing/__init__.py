"""OpenTelemetry traces, opt-in: the one place that imports opentelemetry,
and only in a process whose environment asks for traces.

A process calls :func:`setup` where it starts. Unless its environment names
an exporter (``OTEL_EXPORTER_OTLP_ENDPOINT``, or ``OTEL_TRACES_EXPORTER``
other than ``none``), nothing is imported and :data:`on` stays False: every
hook in hub and sidecar is ``if tracing.on:`` (or a ``with`` that picks
:data:`OFF`), one branch. When on, :mod:`runtime.tracing.spans` is loaded
and the hooks call it (docs/tracing.md).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Final

from ._kept import Kept as Kept
from ._setup import install as install
from ._setup import setup as setup
from ._setup import shutdown as shutdown
from ._setup import wanted as wanted

if TYPE_CHECKING:
    from . import spans as spans

on: bool = False
"""Whether this process traces: set by :func:`setup` (or :func:`install`)."""

OFF: Final = nullcontext()
"""What a ``with`` hook enters when tracing is off: nothing."""

__all__ = ["OFF", "Kept", "install", "on", "setup", "shutdown", "wanted"]
