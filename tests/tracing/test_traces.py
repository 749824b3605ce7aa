"""One trace per mail, across hub and sidecar: a real hub (``serve_hub``) and
a real sidecar (``Sidecar``) in this process over a real nats-server, their
spans caught by the SDK's in-memory exporter (``tracing.install``).

What is asserted is the tree: each span's parent is the one before it, from
the mail's arrival to its handler, its steps and sends, the hub's events,
and the relay; a child run's trace is a trace of its own, linked to the
spawn that started it."""

from __future__ import annotations

import smtplib
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import SpanKind

from hub import HubSettings, serve_hub
from hub.outbound import RelayConfig
from hub.smtp import SmtpConfig
from runtime import Backoff, ProcessSettings, tracing
from runtime.tracing.spans import provider as made_here
from sidecar import Sidecar, SidecarOptions
from tests.support import wait_for
from tests.support.http import HubClient
from tests.support.servers.nats import NatsServerProcess
from tests.support.servers.smtp import SmtpServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOKEN = "t" * 40

FLOW = """
async def main(ctx, item):
    if item.kind == "start":
        ctx.complete({"child": True})
        return
    if item.kind == "child":
        ctx.complete()
        return
    n = await ctx.step("count", lambda: 1)
    if item.subject == "spawn":
        await ctx.spawn("flow:main", {"n": n})
        return
    if item.subject.startswith("m"):
        ctx.state["seen"] = ctx.state.get("seen", 0) + 1
        return
    if item.subject == "out":
        ctx.send("someone@example.org", "hello", "a mail that leaves")
    ctx.complete({"n": n})
"""


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every trace sampled, its roots decided as a process decides them."""
    exporter = InMemorySpanExporter()
    provider = made_here(ParentBased(ALWAYS_ON))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()


@dataclass
class System:
    client: HubClient
    smtp_address: str | None


@asynccontextmanager
async def system(
    tmp_path: Path, nats: NatsServerProcess, *, relay: SmtpServer | None = None
) -> AsyncIterator[System]:
    """A hub with the SMTP ingress (and ``relay``), and the sidecar of the
    deployment ``flow`` it serves, in this process."""
    state, sidecars = tmp_path / "hub", tmp_path / "sidecars"
    state.mkdir(mode=0o700)
    settings = HubSettings(
        state_dir=state,
        http_port=0,
        nats_url=nats.url,
        sidecar_root=sidecars,
        admin_token=TOKEN,
        smtp=SmtpConfig(host="127.0.0.1", port=0, hostname="mx.test"),
        relay=None
        if relay is None
        else RelayConfig(host="127.0.0.1", port=relay.port, backoff=Backoff(0.05, 0.2)),
        process=ProcessSettings(backoff_max=0.05),
    )
    async with anyio.create_task_group() as tg:
        handle = await tg.start(serve_hub, settings)
        client = HubClient(handle.http_url)
        client.http.headers["Authorization"] = f"Bearer {TOKEN}"
        async with aclosing(client):
            dep = await client.deploy("flow", FLOW)
            car = Sidecar(
                SidecarOptions(
                    state_dir=sidecars / dep["id"], deployment_id=dep["id"], backoff_max=0.05
                )
            )
            tg.start_soon(car.run)
            yield System(client, handle.smtp_address)
        tg.cancel_scope.cancel()


async def completed(client: HubClient, run_id: str) -> Any:
    return await client.wait_state(run_id, lambda r: r["status"] == "completed", what="completed")


async def finished(exporter: InMemorySpanExporter, name: str, count: int = 1) -> list[ReadableSpan]:
    """The finished spans whose name starts with ``name``, once there are
    ``count`` of them."""

    async def probe() -> list[ReadableSpan] | None:
        found = [s for s in exporter.get_finished_spans() if s.name.startswith(name)]
        return found if len(found) >= count else None

    return await wait_for(probe, timeout=20, what=f"{count} span(s) {name}")


def only(exporter: InMemorySpanExporter, name: str, **attributes: Any) -> ReadableSpan:
    found = [
        s
        for s in exporter.get_finished_spans()
        if s.name == name and all((s.attributes or {}).get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [s.name for s in exporter.get_finished_spans()])
    return found[0]


def child_of(span: ReadableSpan, parent: ReadableSpan) -> None:
    assert span.context is not None and parent.context is not None
    assert span.parent is not None, f"{span.name} has no parent"
    assert span.context.trace_id == parent.context.trace_id, (span.name, parent.name)
    assert span.parent.span_id == parent.context.span_id, (span.name, parent.name)


def arrival_to_handler(exporter: InMemorySpanExporter, arrival: ReadableSpan, dsp: str) -> None:
    """The chain from a mail's arrival span to its handler's step and the
    hub's copy of what the handler did, each the parent of the next."""
    accept = only(exporter, "mailrun.accept")
    child_of(accept, arrival)
    send = only(exporter, next(s.name for s in exporter.get_finished_spans() if "send " in s.name))
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes is not None
    assert send.attributes["messaging.system"] == "nats"
    assert send.attributes["messaging.destination.name"] == send.name.removeprefix("send ")
    assert send.attributes["mailrun.dispatch.id"] == dsp
    child_of(send, accept)
    receive = only(exporter, send.name.replace("send ", "process "))
    assert receive.kind is SpanKind.CONSUMER
    child_of(receive, send)
    handler = only(exporter, "mailrun.handler", **{"mailrun.dispatch.id": dsp})
    child_of(handler, receive)
    child_of(only(exporter, "mailrun.step", **{"mailrun.step": "count"}), handler)
    events = [
        s
        for s in exporter.get_finished_spans()
        if s.name.startswith("process ")
        and s.parent is not None
        and handler.context is not None
        and s.parent.span_id == handler.context.span_id
    ]
    assert events, "the hub's ingestion of the handler's events is in the trace"


async def test_a_mail_over_http_is_one_trace_from_post_to_handler(
    tmp_path: Path, nats_server: NatsServerProcess, spans: InMemorySpanExporter
) -> None:
    async with system(tmp_path, nats_server) as sys_:
        r = await sys_.client.send("flow@mailrun.local", "hi")
        assert r.status_code == 202, r.text
        receipt = r.json()
        await completed(sys_.client, receipt["run_id"])
        await finished(spans, "mailrun.handler")
        await finished(spans, "process mailrun.hub.events")
    post = only(spans, "POST /mail")
    assert post.kind is SpanKind.SERVER and post.parent is None
    assert post.attributes is not None
    assert post.attributes["http.request.method"] == "POST"
    assert post.attributes["http.route"] == "/mail"
    assert post.attributes["url.path"] == "/mail"
    assert post.attributes["http.response.status_code"] == 202
    arrival_to_handler(spans, post, receipt["dispatch_id"])


async def test_a_mail_over_smtp_is_one_trace_from_data_to_handler(
    tmp_path: Path, nats_server: NatsServerProcess, spans: InMemorySpanExporter
) -> None:
    async with system(tmp_path, nats_server) as sys_:
        assert sys_.smtp_address is not None
        host, port = sys_.smtp_address.rsplit(":", 1)

        def send() -> None:
            with smtplib.SMTP(host, int(port), timeout=10) as smtp:
                smtp.sendmail(
                    "a@example.org",
                    ["flow@mailrun.local"],
                    "From: a@example.org\r\nTo: flow@mailrun.local\r\nSubject: hi\r\n\r\nbody\r\n",
                )

        await anyio.to_thread.run_sync(send)
        handler = (await finished(spans, "mailrun.handler"))[0]
        await finished(spans, "process mailrun.hub.events")
    data = only(spans, "mailrun.smtp DATA")
    assert data.kind is SpanKind.SERVER and data.parent is None
    assert handler.attributes is not None
    arrival_to_handler(spans, data, str(handler.attributes["mailrun.dispatch.id"]))


async def test_a_child_runs_trace_is_linked_to_the_spawn_that_started_it(
    tmp_path: Path, nats_server: NatsServerProcess, spans: InMemorySpanExporter
) -> None:
    async with system(tmp_path, nats_server) as sys_:
        r = await sys_.client.send("flow@mailrun.local", "spawn")
        assert r.status_code == 202, r.text
        await finished(spans, "mailrun.handler", count=3)  # the parent, the child, "child"
    spawn = only(spans, "mailrun.spawn")
    parent_handler = only(
        spans, "mailrun.handler", **{"mailrun.dispatch.id": r.json()["dispatch_id"]}
    )
    child_of(spawn, parent_handler)
    assert spawn.attributes is not None and spawn.context is not None
    child_run = spawn.attributes["mailrun.child_run.id"]
    start = only(
        spans,
        f"send mailrun.mail.inbound.{r.json()['deployment_id']}",
        **{"mailrun.run.id": child_run, "mailrun.dispatch.kind": "start"},
    )
    assert start.parent is None and start.context is not None
    assert start.context.trace_id != spawn.context.trace_id, "the child's trace is its own"
    assert [link.context.span_id for link in start.links] == [spawn.context.span_id]
    child_handler = only(spans, "mailrun.handler", **{"mailrun.run.id": child_run})
    assert child_handler.context is not None
    assert child_handler.context.trace_id == start.context.trace_id


async def test_a_sent_mails_relay_span_is_in_the_trace_of_its_send(
    tmp_path: Path, nats_server: NatsServerProcess, spans: InMemorySpanExporter, smtp: SmtpServer
) -> None:
    async with system(tmp_path, nats_server, relay=smtp) as sys_:
        r = await sys_.client.send("flow@mailrun.local", "out")
        assert r.status_code == 202, r.text
        relay = (await finished(spans, "mailrun.relay"))[0]
    send = only(spans, "mailrun.send")
    child_of(relay, send)
    handler = only(spans, "mailrun.handler", **{"mailrun.dispatch.id": r.json()["dispatch_id"]})
    child_of(send, handler)
    assert only(spans, "POST /mail").context.trace_id == relay.context.trace_id  # type: ignore[union-attr]
    assert relay.kind is SpanKind.CLIENT
    assert relay.attributes is not None
    assert relay.attributes["mailrun.recipient.domain"] == "example.org"
    assert len(smtp.recorder.received) == 1


class EveryOther(Sampler):
    """Samples the first trace, drops the next, and so on."""

    def __init__(self) -> None:
        self.roots = 0

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        self.roots += 1
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.roots % 2 else Decision.DROP)

    def get_description(self) -> str:
        return "EveryOther"


@pytest.mark.parametrize("decided_first", [True, False], ids=["head", "sdk"])
async def test_a_trace_its_arrival_did_not_sample_makes_no_span_on_the_way(
    tmp_path: Path, nats_server: NatsServerProcess, decided_first: bool
) -> None:
    """Roots decided before their span (a process's own provider) or by the
    SDK (a provider made elsewhere): the same traces, whole or absent."""
    exporter = InMemorySpanExporter()
    sampler = ParentBased(EveryOther())
    provider = made_here(sampler) if decided_first else TracerProvider(sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        async with system(tmp_path, nats_server) as sys_:
            runs = []
            for n in range(12):
                r = await sys_.client.send("flow@mailrun.local", f"m{n}")
                assert r.status_code == 202, r.text
                runs.append(r.json())
            await sys_.client.wait_state(
                runs[-1]["run_id"], lambda run: (run["state"] or {}).get("seen") == 12
            )
    finally:
        tracing.shutdown()
    finished_spans = exporter.get_finished_spans()
    posts = [s for s in finished_spans if s.name == "POST /mail"]
    sampled = {s.context.trace_id for s in posts if s.context is not None}
    assert len(posts) == 6, "every other arrival sampled"
    handlers = [s for s in finished_spans if s.name == "mailrun.handler"]
    assert len(handlers) == len(posts)
    assert {s.context.trace_id for s in finished_spans if s.context is not None} == sampled
