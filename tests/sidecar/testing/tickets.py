"""A ticket system's API for the ``ticket`` recipe's tests: a real HTTP
server on a free local port (a thread), which counts the tickets it
creates and can answer the first requests 500."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Tickets:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.requests = 0
        self.failures = 0
        """The next requests answered 500 (then counted down)."""
        self.url = ""
        self._lock = threading.Lock()

    def answer(self, body: bytes) -> tuple[int, bytes]:
        with self._lock:
            self.requests += 1
            if self.failures:
                self.failures -= 1
                return 500, b'{"error": "down"}'
            ticket = {"id": f"T-{len(self.created) + 1}", **json.loads(body)}
            self.created.append(ticket)
            return 201, json.dumps({"id": ticket["id"]}).encode()


@contextmanager
def ticket_server() -> Iterator[Tickets]:
    tickets = Tickets()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            status, body = tickets.answer(self.rfile.read(size))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tickets.url = f"http://127.0.0.1:{server.server_address[1]}/tickets"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tickets
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
