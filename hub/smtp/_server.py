"""aiosmtpd's SMTP protocol served on the hub's own event loop.

aiosmtpd's ``Controller`` would run the server in a thread with a loop of
its own, where the acceptor and the store are out of reach. Here the hub's
task group owns the server instead: :meth:`SmtpServer.run` is one of its
tasks, opens the listener with ``loop.create_server`` on a socket bound
beforehand (a port clash fails the hub at once), and closes it, and every
session, when it ends. A session's commands run in the task aiosmtpd starts
per connection; the server keeps each session it admitted, so none outlives
it. (The hub's loop is always asyncio's, or uvloop: anyio's asyncio backend.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from typing import Any, cast

import anyio
import anyio.abc
from aiosmtpd.smtp import SMTP, Session

from runtime import HostPort

from ..api import bind_socket
from ..store import Acceptor, Store
from ._config import SmtpConfig
from ._handler import IngressHandler

_BUSY = b"421 4.7.0 Too many connections, try again later\r\n"
_STOPPING = b"421 4.3.2 Service shutting down, try again later\r\n"


class QuietSession(Session):
    """aiosmtpd's Session without the deprecation warning its ``login_data``
    gives after every login (aiosmtpd itself reads and writes it; nothing
    here uses it). The test suite's SMTP server uses it too."""

    @property
    def login_data(self) -> Any:
        return self._login_data

    @login_data.setter
    def login_data(self, value: Any) -> None:
        self._login_data = value


class _Protocol(SMTP):
    """One connection. Admitted by its server (or refused at once, 421, past
    ``max_connections``), and let go when the connection is lost."""

    def __init__(self, server: SmtpServer, **kwargs: object) -> None:
        super().__init__(server.handler, **kwargs)  # type: ignore[arg-type]
        self._server = server
        self._refused = False

    def _create_session(self) -> Session:
        return QuietSession(self.loop)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Called again, with the TLS transport, after STARTTLS: admitted once.
        if self.transport is None and not self._server.admit(self):
            self._refused = True
            _goodbye(transport, _BUSY)
            return
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        if self._refused:
            return
        try:
            super().connection_lost(error)
        finally:
            self._server.release(self)

    def eof_received(self) -> bool | None:
        return False if self._refused else super().eof_received()

    def close(self, goodbye: bytes) -> asyncio.Task[None] | None:
        """Say ``goodbye`` and close; the session's task, to wait for."""
        if self.transport is not None:
            _goodbye(self.transport, goodbye)
        return self._handler_coroutine


def _goodbye(transport: asyncio.BaseTransport, line: bytes) -> None:
    # A stream transport, of asyncio or of uvloop; uvloop's do not derive
    # from asyncio.WriteTransport, so no isinstance check can tell.
    stream = cast(asyncio.WriteTransport, transport)
    if not stream.is_closing():
        stream.write(line)
        stream.close()


class SmtpServer:
    """The SMTP ingress: run :meth:`run` in the hub's task group; stop it
    gracefully with :meth:`shutdown`, or at once by cancellation."""

    def __init__(
        self,
        config: SmtpConfig,
        sock: socket.socket | None = None,
        *,
        store: Store,
        acceptor: Acceptor,
        max_body: int,
        grace: float = 5.0,
    ) -> None:
        self.config = config
        self.handler = IngressHandler(store, acceptor, config, max_body=max_body)
        self._max_body = max_body
        self._grace = grace
        self._tls = config.tls_context()
        # The hub binds it before anything starts and closes it; else bound here.
        self._sock = sock if sock is not None else bind_socket(config.host, config.port)
        self._sessions: set[_Protocol] = set()
        self._listener: asyncio.Server | None = None

    @property
    def address(self) -> HostPort:
        """Where it listens (the bound port, when the config said 0)."""
        host, port = self._sock.getsockname()[:2]
        return HostPort(host, port)

    def admit(self, session: _Protocol) -> bool:
        if self.handler.stopping or len(self._sessions) >= self.config.max_connections:
            return False
        self._sessions.add(session)
        return True

    def release(self, session: _Protocol) -> None:
        self._sessions.discard(session)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        # aiosmtpd logs every command line at INFO, an AUTH PLAIN's credentials
        # among them, and lines per connection: only its warnings reach the log.
        logging.getLogger("mail.log").setLevel(logging.WARNING)
        loop = asyncio.get_running_loop()
        # socket.getfqdn may ask DNS: once, off the loop, not per connection.
        hostname = self.config.hostname or await anyio.to_thread.run_sync(socket.getfqdn)
        factory = functools.partial(
            _Protocol,
            self,
            data_size_limit=self.config.message_limit(self._max_body),
            enable_SMTPUTF8=True,
            hostname=hostname,
            ident="mailrun",
            tls_context=self._tls,
            timeout=self.config.timeout,
            auth_required=self.config.auth,
            auth_require_tls=True,  # never a password over a plain connection
            authenticator=self.handler.authenticate if self.config.auth else None,
            auth_exclude_mechanism=() if self.config.auth else ("LOGIN", "PLAIN"),
            loop=loop,
        )
        try:
            self._listener = await loop.create_server(factory, sock=self._sock)
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await self._close(wait_for_data=False)
                self._sock.close()

    async def shutdown(self) -> None:
        """Stop taking connections and messages; let messages whose answer is
        being decided get it (bounded by ``grace``); then close every session."""
        await self._close(wait_for_data=True)

    async def _close(self, *, wait_for_data: bool) -> None:
        self.handler.stopping = True
        if self._listener is not None:
            self._listener.close()
        if wait_for_data:
            with anyio.move_on_after(self._grace):
                await self.handler.idle.wait()
        tasks = [t for s in list(self._sessions) if (t := s.close(_STOPPING)) is not None]
        if tasks:
            # They end as their connection is lost (aiosmtpd cancels them then).
            await asyncio.wait(tasks, timeout=self._grace)
