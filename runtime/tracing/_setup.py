"""Turning traces on in a process: whether its environment asks for them
(:func:`wanted`), the SDK set up from it (:func:`setup`) or from a test's
own provider (:func:`install`), and flushed on a clean stop (:func:`shutdown`).

Nothing here imports opentelemetry unless traces are wanted: the imports
are inside the functions that run only then.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger("mailrun.tracing")


def wanted(env: Mapping[str, str]) -> bool:
    """Whether ``env`` (the process's environment) asks for traces: the
    standard variables name an exporter, and the SDK is not disabled."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n]
    if names:
        return any(n != "none" for n in names)
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def setup(service: str, env: Mapping[str, str]) -> bool:
    """Trace this process if its environment asks for it: the SDK's
    TracerProvider, a BatchSpanProcessor per exporter the environment names,
    ``service.name`` ``service`` unless ``OTEL_SERVICE_NAME`` is set. True
    when on. A process that calls it must call :func:`shutdown` as it stops."""
    if not wanted(env):
        return False
    try:
        from . import spans
    except ImportError as exc:  # asked for, but the otel extra is not installed
        log.error("tracing stays off: %s (install mailrun[otel])", exc)
        return False

    provider = spans.provider_from_env(service, env)
    spans.use(provider, global_too=True)
    _switch(True)
    log.info("tracing on: service %s", spans.service_name(provider))
    return True


def install(provider: TracerProvider) -> None:
    """Trace this process into ``provider`` (a test's, with its own
    exporter), whatever the environment says."""
    from . import spans

    spans.use(provider, global_too=False)
    _switch(True)


def shutdown() -> None:
    """Flush what is buffered and stop tracing (a clean stop); nothing when off."""
    if not _package()["on"]:
        return
    _switch(False)
    from . import spans

    spans.stop()


def _switch(on: bool) -> None:
    _package()["on"] = on


def _package() -> dict[str, Any]:
    """The package's namespace, where the hooks read ``tracing.on``."""
    return vars(sys.modules[__name__.rpartition(".")[0]])
