"""A stub hub for the CLI's tests: a real HTTP server on a loopback port that
answers canned JSON per (method, path) and records each request and its
Authorization header, so a test proves what the CLI sends and how it renders
what it gets. The ``stub`` fixture (tests/hub/cli/conftest.py) serves one."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from click.testing import CliRunner

from hub.cli.main import main

DEP_A = "dep_" + "a" * 26
DEP_B = "dep_" + "b" * 26
RUN_A = "run_" + "1" * 26
DSP_A = "dsp_" + "2" * 26
APR_A = "apr_" + "3" * 26


@dataclass
class Stub:
    url: str
    routes: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)


@contextmanager
def serve_stub() -> Iterator[Stub]:
    """A stub hub on a free loopback port, shut down on the way out."""
    state = Stub(url="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            state.requests.append((self.command, self.path, json.loads(raw) if raw else None))
            state.authorization.append(self.headers.get("Authorization"))
            code, body = state.routes.get(
                (self.command, self.path),
                (404, {"status": "error", "reason": "not_found", "detail": self.path}),
            )
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def cli(stub: Stub | None, *args: str, **kwargs: Any) -> Any:
    hub = ["--hub", stub.url] if stub is not None else []
    return CliRunner().invoke(main, [*args, *hub], catch_exceptions=False, **kwargs)


def deployment(dep_id: str, name: str, status: str = "deployed", **extra: Any) -> dict[str, Any]:
    return {
        "id": dep_id,
        "name": name,
        "address": f"{name}@mailrun.local",
        "public_key": "pk",
        "status": status,
        "created_at": 1767225600.0,
        **extra,
    }
