"""What traces cost: single-POST throughput of a real `mailrun up` with tracing off and on.

    .venv/bin/python bench/mail/tracing.py [--mails 3000] [--senders 64] [--rounds 2]
        [--sample RATIO] [--json]
    .venv/bin/python bench/mail/tracing.py --hooks [--mails 20000] [--sample RATIO] [--json]

Runs bench_e2e.py's benchmark (one ``POST /mail`` per mail, one deployment)
``--rounds`` times each way, in turn (off, on, then on, off, and so on) so
that a busy machine, its load rising or falling, weighs on both alike, the
load average noted before each. On:
``OTEL_EXPORTER_OTLP_ENDPOINT`` names a sink in this process that takes
every OTLP/HTTP export and drops it (counting the requests and bytes, so the
figures show the spans did leave), which is what hub and sidecars export to
with the default exporter (otlp, http/protobuf) through their
BatchSpanProcessor. Prints each way's best accepted/s and processed/s,
their CPU ms per mail, each round's on/off (an "on" over the "off" of its
round) and their median, the figure to quote on a noisy machine, and
each side's median CPU a mail each way.

The sampler is the one an operator gets: with no ``--sample``, none is
named, so the default applies (``parentbased_traceidratio`` at
``runtime.tracing.spans.DEFAULT_RATIO``, docs/tracing.md); ``--sample
RATIO`` names ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` with that
ratio (``--sample 1``: ``parentbased_always_on``, every mail).

``--hooks`` measures, in this process and without the rest of the system,
the CPU that the tracing hooks of one mail spend in the hub (``POST /mail``,
``mailrun.accept``, the dispatcher's ``send``, the events' ``process``) and
in the sidecar (its ``process`` and ``mailrun.handler``), spans made by the
SDK and handed to a BatchSpanProcessor whose exporter encodes them for OTLP
and drops the bytes: a figure that a busy machine does not blur the way it
blurs the end-to-end one. Mails go in chunks of 500, each side's part of a
chunk timed as one, so the clock's own cost stays out of the figure; the
objects made before the first mail are frozen out of the collector's
reach, so that its one full pass over them does not land on a side by chance.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mail.bench_e2e import bench, scratch_dir
from runtime.loops import loop_options
from tests.support import free_port

_OTEL = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
)


class Sink:
    """An OTLP/HTTP collector that keeps nothing: 200 to every export."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0

    async def take(self, request: web.Request) -> web.Response:
        self.bytes += len(await request.read())
        self.requests += 1
        return web.Response(body=b"", content_type="application/x-protobuf")


async def both(args: argparse.Namespace) -> dict[str, Any]:
    sink = Sink()
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/traces", sink.take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    rounds: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    loads: list[float] = []
    try:
        for n in range(args.rounds):
            # off, on, on, off...: a load that rises or falls through the
            # rounds weighs on both ways alike, not always on the second.
            for way in ("off", "on") if n % 2 == 0 else ("on", "off"):
                with _sampler(args.sample if way == "on" else None):
                    if way == "on":
                        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
                    loads.append(round(os.getloadavg()[0], 1))
                    with scratch_dir("mailrun-bench-trace-", keep=False) as tmp:
                        figures = await bench(args.mails, args.senders, "full", tmp)
                rounds[way].append(figures)
    finally:
        await runner.cleanup()
    best = {way: max(runs, key=lambda f: f["accepted_per_s"]) for way, runs in rounds.items()}
    ratios = [
        on["accepted_per_s"] / off["accepted_per_s"]
        for off, on in zip(rounds["off"], rounds["on"], strict=True)
    ]
    return {
        "mails": args.mails,
        "senders": args.senders,
        "rounds": args.rounds,
        "sample": _sampled(args.sample),
        "load_before_each": loads,
        "on_over_off_each_round": [round(r, 3) for r in ratios],
        "on_over_off_median": statistics.median(ratios),
        "exporter": "otlp http/protobuf to a local sink that drops (BatchSpanProcessor)",
        "off": _figures(best["off"], rounds["off"]),
        "on": _figures(best["on"], rounds["on"]),
        "on_over_off_accepted": best["on"]["accepted_per_s"] / best["off"]["accepted_per_s"],
        "on_over_off_processed": max(f["processed_per_s"] for f in rounds["on"])
        / max(f["processed_per_s"] for f in rounds["off"]),
        "sink_requests": sink.requests,
        "sink_mib": sink.bytes / 2**20,
    }


@contextmanager
def _sampler(sample: float | None) -> Iterator[None]:
    """The process's environment with no OTEL_* variable but the sampler
    ``sample`` names (None: none, the default applies), as the bench's
    children and the SDK read it; as it was again afterwards."""
    saved = {name: os.environ.pop(name) for name in _OTEL if name in os.environ}
    if sample is not None and sample >= 1:
        os.environ["OTEL_TRACES_SAMPLER"] = "parentbased_always_on"
    elif sample is not None:
        os.environ["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
        os.environ["OTEL_TRACES_SAMPLER_ARG"] = str(sample)
    try:
        yield
    finally:
        for name in _OTEL:
            os.environ.pop(name, None)
        os.environ.update(saved)


def _sampled(sample: float | None) -> str:
    if sample is not None:
        return f"{sample:g}"
    from runtime.tracing.spans import DEFAULT_RATIO

    return f"default ({DEFAULT_RATIO:g})"


def _figures(best: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "accepted_per_s": best["accepted_per_s"],
        "processed_per_s": max(f["processed_per_s"] for f in runs),
        "accept_p50_ms": best["accept_p50_ms"],
        "accept_p99_ms": best["accept_p99_ms"],
        "cpu_ms_per_mail": best["cpu_ms_per_mail"],
        "every_round_accepted_per_s": [round(f["accepted_per_s"]) for f in runs],
        # CPU a mail blurs less than throughput on a busy machine: each side's median.
        "median_cpu_ms_per_mail": {
            side: round(statistics.median(f["cpu_ms_per_mail"][side] for f in runs), 3)
            for side in best["cpu_ms_per_mail"]
        },
    }


_CHUNK = 500  # mails a side's part is timed for at once: well within the kept contexts' bound


class _Item:
    """A MailInbound as the hooks see it."""

    def __init__(self, n: int) -> None:
        self.dispatch_id = f"dsp_{n:026x}"
        self.deployment_id = "dep_" + "d" * 26
        self.run_id: str | None = "run_" + "r" * 26
        self.kind = "mail"
        self.trace: dict[str, str] = {}


class _Processed:
    def __init__(self, trace: dict[str, str]) -> None:
        self.run_id = "run_" + "r" * 26
        self.trace = trace


async def hooks(mails: int, sample: float | None) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from runtime import tracing
    from runtime.tracing import spans

    class Encoded(SpanExporter):
        """What the OTLP/HTTP exporter does to spans, short of sending them."""

        def export(self, spans: Any) -> SpanExportResult:
            encode_spans(spans).SerializePartialToString()
            return SpanExportResult.SUCCESS

    with _sampler(sample):  # the provider an operator's environment makes
        environ = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}
        provider = spans.provider_from_env("mailrun-bench", environ)
    # A queue for every span of a chunk: a span dropped would be a span not priced.
    provider.add_span_processor(BatchSpanProcessor(Encoded(), max_queue_size=2**16))
    tracing.install(provider)
    inbound = "mailrun.mail.inbound.dep_" + "d" * 26
    events = "mailrun.hub.events.dep_" + "d" * 26

    async def answered(item: _Item) -> tuple[int, bytes]:
        with spans.accepting(1):
            spans.keep_accepted(spans.current(), [item.dispatch_id])
        return 202, b"{}"

    # What was there before the first mail (the modules, mostly) stays out of
    # the collector's way: one full collection of it costs some 50 ms, which
    # would fall on one side or the other by chance.
    gc.collect()
    gc.freeze()
    hub = sidecar = 0.0
    for first in range(0, mails, _CHUNK):
        items = [_Item(n) for n in range(first, min(first + _CHUNK, mails))]
        began = time.process_time()
        for item in items:  # the hub: the arrival, its accept, the dispatcher's send
            await spans.http_server("POST", "/mail", answered(item))
            with spans.sending(inbound, [item]):
                pass
        hub += time.process_time() - began
        began = time.process_time()
        done = []
        for item in items:  # the sidecar: the delivery, the handler
            with (
                spans.receiving(inbound, [item]),
                spans.handling(item.deployment_id, item.run_id or "", item.dispatch_id) as trace,
            ):
                done.append(_Processed(trace))
        sidecar += time.process_time() - began
        began = time.process_time()
        for event in done:  # the hub: the handler's event
            with spans.ingesting(events, items[0].deployment_id, [event]):
                pass
        hub += time.process_time() - began
    began = time.process_time()
    tracing.shutdown()  # the export of what is left, counted on both sides alike
    flushed = time.process_time() - began
    gc.unfreeze()
    return {
        "mails": mails,
        "sample": _sampled(sample),
        "hub_us_per_mail": (hub + flushed / 2) / mails * 1e6,
        "sidecar_us_per_mail": (sidecar + flushed / 2) / mails * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=3000)
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="runs each way, alternating")
    parser.add_argument("--sample", type=float, default=None,
                        help="share of traces sampled (default: as an operator gets)")  # fmt: skip
    parser.add_argument("--hooks", action="store_true",
                        help="the hooks' CPU a mail, here (--mails default 20000)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.sample is not None and not 0 <= args.sample <= 1:
        parser.error("--sample is a share, 0 to 1")
    if args.hooks:
        figures = anyio.run(hooks, 20000 if args.mails == 3000 else args.mails, args.sample)
        if args.json:
            print(json.dumps(figures, indent=2))
        else:
            print(
                f"tracing hooks, {figures['sample']} sampled: hub"
                f" {figures['hub_us_per_mail']:.1f} us a mail, sidecar"
                f" {figures['sidecar_us_per_mail']:.1f} us a mail"
            )
        return
    if args.mails < 1 or args.senders < 1 or args.rounds < 1:
        parser.error("--mails, --senders and --rounds must be positive")
    figures = anyio.run(both, args, backend_options=loop_options(os.environ))
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for way in ("off", "on"):
        f = figures[way]
        cpu = ", ".join(f"{name} {ms:.3f}" for name, ms in f["cpu_ms_per_mail"].items())
        print(
            f"tracing {way:3}  accepted/s {f['accepted_per_s']:6.0f}  processed/s"
            f" {f['processed_per_s']:6.0f}  p50/p99 {f['accept_p50_ms']:.1f}/"
            f"{f['accept_p99_ms']:.1f} ms  CPU ms/mail {cpu}"
        )
    print(f"sampled       {figures['sample']} of the traces")
    print(
        f"on / off      best accepted {figures['on_over_off_accepted']:.3f},"
        f" processed {figures['on_over_off_processed']:.3f}"
        f" (sink took {figures['sink_requests']} exports, {figures['sink_mib']:.1f} MiB)"
    )
    print(
        f"each round    accepted on/off {figures['on_over_off_each_round']}, median"
        f" {figures['on_over_off_median']:.3f}; load before each {figures['load_before_each']}"
    )
    cpu = {way: figures[way]["median_cpu_ms_per_mail"] for way in ("off", "on")}
    print(
        "median CPU    ms a mail, off / on: "
        + ", ".join(f"{side} {cpu['off'][side]:.3f} / {cpu['on'][side]:.3f}" for side in cpu["off"])
    )


if __name__ == "__main__":
    main()
