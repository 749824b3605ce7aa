"""A lean HTTP/1.1 client for the load generators: keep-alive connections
over asyncio streams, responses parsed by httptools (the parser the hub
runs on).

aiohttp spent about 0.3 ms of CPU per request here, as much as the hub's
whole share of a mail: on a 2-core machine the load generator took CPU from
what it measured. This one spends a fraction of that. It knows only what
the benchmarks send: a body with a Content-Length, a response with one (or
chunked), one request at a time per connection.
"""

from __future__ import annotations

import asyncio
from collections import deque

import httptools


class _Response:
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.done = False

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class Connection:
    """One keep-alive connection; :meth:`request` one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self._reader, self._writer, self._host = reader, writer, host

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """Status and body of one request."""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self._host}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        head.append(f"Content-Length: {len(body)}")
        self._writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        response = _Response()
        while not response.done:
            data = await self._reader.read(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            response.parser.feed_data(data)
        return response.parser.get_status_code(), b"".join(response.body)

    @property
    def closed(self) -> bool:
        """The server closed it (a keep-alive that idled past its timeout)."""
        return self._reader.at_eof() or self._writer.is_closing()

    def close(self) -> None:
        self._writer.close()


class Pool:
    """Connections to one server, opened when none is idle."""

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._idle: deque[Connection] = deque()

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        while self._idle and self._idle[-1].closed:
            self._idle.pop().close()
        conn = self._idle.pop() if self._idle else await Connection.open(self._host, self._port)
        try:
            answer = await conn.request(method, path, body, headers)
        except BaseException:
            conn.close()
            raise
        self._idle.append(conn)
        return answer

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
