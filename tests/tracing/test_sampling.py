"""Which traces are sampled: with no ``OTEL_TRACES_SAMPLER`` the default
(``parentbased_traceidratio`` at ``DEFAULT_RATIO``), and exactly what the
operator names otherwise; the decision made once, at the root, and held by
every span after it.

Each test makes the provider as a process does (``provider_from_env``),
exporting to the SDK's in-memory exporter, and counts the arrivals' spans
of many mails (``POST /mail``, the hook the hub's HTTP API calls)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
)

from runtime import tracing
from runtime.tracing import spans

MAILS = 2000


@pytest.fixture(autouse=True)
def _untraced_after() -> Iterator[None]:
    yield
    tracing.shutdown()


def _traced(provider: TracerProvider) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    return exporter


def _from_env(monkeypatch: pytest.MonkeyPatch, **environ: str) -> InMemorySpanExporter:
    """The provider a process makes of ``environ`` (the SDK reads the
    sampler's variables from the process's environment, so they are there too)."""
    for name in ("OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return _traced(
        spans.provider_from_env("mailrun-hub", {"OTEL_TRACES_EXPORTER": "none", **environ})
    )


async def _answer() -> tuple[int, bytes]:
    return 202, b"{}"


def _posts(exporter: InMemorySpanExporter, mails: int = MAILS) -> int:
    """How many of ``mails`` arrivals made their span."""

    async def arrive() -> None:
        for _ in range(mails):
            await spans.http_server("POST", "/mail", _answer())

    anyio.run(arrive)
    return sum(1 for s in exporter.get_finished_spans() if s.name == "POST /mail")


def test_unset_the_default_ratio_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    assert spans.DEFAULT_RATIO == 0.01
    # Binomial(2000, 0.01): 20 expected; 0, or over 60, one time in a billion.
    assert 1 <= _posts(_from_env(monkeypatch)) <= 60


def test_a_sampler_named_is_the_one_used(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = _from_env(monkeypatch, OTEL_TRACES_SAMPLER="parentbased_always_on")
    assert _posts(exporter) == MAILS


def test_a_sampler_named_takes_its_own_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = _from_env(
        monkeypatch, OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG="0.5"
    )
    assert 800 <= _posts(exporter) <= 1200


def test_a_ratio_alone_is_the_default_samplers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 800 <= _posts(_from_env(monkeypatch, OTEL_TRACES_SAMPLER_ARG="0.5")) <= 1200
    tracing.shutdown()
    assert _posts(_from_env(monkeypatch, OTEL_TRACES_SAMPLER_ARG="1")) == MAILS


def test_a_ratio_that_is_none_leaves_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 1 <= _posts(_from_env(monkeypatch, OTEL_TRACES_SAMPLER_ARG="lots")) <= 60


class EveryOther(Sampler):
    """Samples the first root, drops the next, and so on; counts its calls."""

    def __init__(self) -> None:
        self.asked = 0

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        self.asked += 1
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.asked % 2 else Decision.DROP)

    def get_description(self) -> str:
        return "EveryOther"


@pytest.mark.parametrize("decided_first", [True, False], ids=["head", "sdk"])
def test_a_root_asks_the_sampler_once(decided_first: bool) -> None:
    """Decided before its span (a provider of ``spans.provider``) or by the
    SDK's own start_span (a provider made elsewhere): one call a root, and
    a sampled root's span is the one recorded."""
    sampler = EveryOther()
    parent_based = ParentBased(sampler)
    provider = spans.provider(parent_based) if decided_first else TracerProvider(parent_based)
    assert _posts(_traced(provider), 10) == 5
    assert sampler.asked == 10
