"""Tracing is off unless the standard variables ask for it: then nothing of
opentelemetry is imported; on, a process exports its spans with the exporter
they name, as the service they name, and flushes them when it stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from runtime import sidecar_env, tracing
from runtime.tracing import Kept
from tests.support import REPO, free_port
from tests.support.launch.starts import HUB_START_TIMEOUT, started
from tests.support.servers.nats import NatsServerProcess


def _clean_env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, "PYTHONPATH": str(REPO), **more}


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "svc"}, False),
    ],
)
def test_what_the_environment_asks(environ: dict[str, str], wanted: bool) -> None:
    assert tracing.wanted(environ) is wanted


_IMPORTS = """
import os, sys
import hub._server, hub.cli, sidecar.__main__, sidecar._app
from runtime import tracing
on = tracing.setup("mailrun-hub", os.environ)
print(on, sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_off_imports_no_opentelemetry_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _IMPORTS], env=_clean_env(), capture_output=True, check=True
    )
    assert out.stdout.decode().split() == ["False", "[]"]


def test_on_imports_it_and_names_the_service() -> None:
    code = _IMPORTS + "from opentelemetry import trace\n"
    code += "print(trace.get_tracer_provider().resource.attributes['service.name'])\n"
    env = _clean_env(OTEL_TRACES_EXPORTER="console")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    first, service = out.stdout.decode().splitlines()[:2]
    assert first.startswith("True ['opentelemetry")
    assert service == "mailrun-hub"
    env["OTEL_SERVICE_NAME"] = "mail-edge"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    assert out.stdout.decode().splitlines()[1] == "mail-edge"


def test_sidecars_get_the_otel_variables() -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "AWS_SECRET": "x"}
    env = sidecar_env(environ, home=Path("/tmp/home"))
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4318"
    assert "AWS_SECRET" not in env


def test_kept_contexts_are_bounded_oldest_first() -> None:
    kept: Kept[int] = Kept(size=3)
    for n in range(5):
        kept.put(f"k{n}", n)
    assert len(kept) == 3
    assert kept.get("k0") is None and kept.get("k1") is None
    assert kept.pop("k4") == 4 and kept.get("k4") is None


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_hub_on_the_console_exporter_flushes_its_spans_on_a_clean_stop(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    port = free_port()
    state = tmp_path / "hub"
    out = tmp_path / "stdout"
    argv = [sys.executable, "-m", "hub", "--state-dir", str(state), "--http", f"127.0.0.1:{port}"]
    argv += ["--nats", nats_server.url]
    # The batch processor would wait 5 s before exporting: only the stop flushes it.
    # Every trace sampled: the default samples too few for one mail to show.
    env = _clean_env(
        OTEL_TRACES_EXPORTER="console",
        OTEL_BSP_SCHEDULE_DELAY="60000",
        OTEL_TRACES_SAMPLER="parentbased_always_on",
    )
    with out.open("wb") as stdout:
        proc = await anyio.open_process(argv, env=env, stdout=stdout, stderr=subprocess.DEVNULL)
    async with proc:

        async def answered() -> int | None:
            token = state / "admin-token"
            if not token.exists():
                return None
            headers = {"Authorization": f"Bearer {token.read_text().strip()}"}
            try:
                async with httpx.AsyncClient() as http:
                    r = await http.post(
                        f"http://127.0.0.1:{port}/mail",
                        json={"to": "nobody@mailrun.local", "subject": "hi"},
                        headers=headers,
                    )
            except httpx.TransportError:
                return None
            return r.status_code

        answer = await started(
            answered, exit_code=lambda: proc.returncode, timeout=HUB_START_TIMEOUT,
            what="the hub's answer",
        )  # fmt: skip
        assert answer == 404
        assert b"POST /mail" not in out.read_bytes()  # still buffered
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            await proc.wait()
    assert proc.returncode == 0
    spans = _console_spans(out.read_text())
    post = [s for s in spans if s["name"] == "POST /mail"]
    assert len(post) == 1
    assert post[0]["attributes"]["http.response.status_code"] == 404
    assert post[0]["resource"]["attributes"]["service.name"] == "mailrun-hub"


def _console_spans(text: str) -> list[dict[str, object]]:
    """The console exporter's output: one JSON object per span, one after another."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        span, at = decoder.raw_decode(text, at)
        spans.append(span)
    return spans
