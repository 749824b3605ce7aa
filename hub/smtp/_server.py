"""aiosmtpd's SMTP protocol served on the hub's own event loop, through
aiosmtpd's documented API only.

aiosmtpd's ``Controller`` would run the server in a thread with a loop of
its own, where the acceptor and the store are out of reach. Here the hub's
task group owns the server instead: :meth:`SmtpServer.run` is one of its
tasks, opens the listener with ``loop.create_server`` on a socket the hub
bound beforehand (a port clash fails the hub at once), and does not return
before every session it admitted is closed and no hook of the handler runs
any more.

What aiosmtpd leaves out is owned here. A session's commands run in a task
aiosmtpd starts per connection and cancels when the connection is lost; the
server does not reach for that task. It counts the connections it admitted
(``connection_made`` / ``connection_lost``, the protocol's public asyncio
callbacks) and the handler counts its hooks in flight: both back to zero
means the sessions are over. (The hub's loop is always asyncio's, or
uvloop: anyio's asyncio backend.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from typing import cast

import anyio
import anyio.abc
from aiosmtpd.smtp import SMTP

from runtime import Flag
from runtime.config import HostPort

from ..intake import Acceptor
from ..store import Store
from ._config import SmtpConfig
from ._handler import SmtpHandler

_BUSY = b"421 4.7.0 Too many connections, try again later\r\n"
_STOPPING = b"421 4.3.2 Service shutting down, try again later\r\n"


class _LoginDataNotice(logging.Filter):
    """Drops aiosmtpd's warning that ``Session.login_data`` is deprecated.

    aiosmtpd itself sets that attribute after every successful login, which
    logs the warning each time; nothing here reads it, so the line would say
    nothing about this hub."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "login_data is deprecated" not in record.getMessage()


_QUIET_LOGINS = _LoginDataNotice()


class _Connection(SMTP):
    """One client connection: admitted by its server, or refused at once
    (421) past ``max_connections`` or while it stops; let go when lost."""

    def __init__(self, ingress: SmtpServer, **kwargs: object) -> None:
        super().__init__(ingress.handler, **kwargs)  # type: ignore[arg-type]
        self.ingress = ingress
        self.admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Called again, with the TLS transport, after STARTTLS: admitted once.
        if not self.admitted:
            refusal = self.ingress.admit(self)
            if refusal is not None:
                _goodbye(transport, refusal)
                return
            self.admitted = True
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        if not self.admitted:
            return  # aiosmtpd never saw this connection
        try:
            super().connection_lost(error)
        finally:
            self.ingress.release(self)

    def eof_received(self) -> bool | None:
        return super().eof_received() if self.admitted else False

    def say_goodbye(self, line: bytes) -> None:
        """Say ``line`` and close; aiosmtpd ends the session as the connection goes."""
        if self.transport is not None:
            _goodbye(self.transport, line)


def _goodbye(transport: asyncio.BaseTransport, line: bytes) -> None:
    # A stream transport, of asyncio or of uvloop; uvloop's do not derive
    # from asyncio.WriteTransport, so no isinstance check can tell.
    stream = cast(asyncio.WriteTransport, transport)
    if not stream.is_closing():
        stream.write(line)
        stream.close()


class SmtpServer:
    """The SMTP ingress on ``sock`` (bound by the caller, closed when
    :meth:`run` ends): run :meth:`run` in the hub's task group; stop it
    gracefully with :meth:`shutdown`, or at once by cancellation."""

    def __init__(
        self,
        config: SmtpConfig,
        sock: socket.socket,
        *,
        store: Store,
        acceptor: Acceptor,
        max_body: int,
        grace: float = 5.0,
    ) -> None:
        self.config = config
        self.handler = SmtpHandler(store, acceptor, config, max_body=max_body)
        self._max_body = max_body
        self._grace = grace
        self._tls = config.tls_context()
        self._sock = sock
        self._sessions: set[_Connection] = set()
        self._no_sessions = Flag(True)
        self._listener: asyncio.Server | None = None

    @property
    def address(self) -> HostPort:
        """Where it listens (the bound port, when the config said 0)."""
        host, port = self._sock.getsockname()[:2]
        return HostPort(host, port)

    def admit(self, session: _Connection) -> bytes | None:
        """Take ``session`` on; else the line it is refused with."""
        if self.handler.stopping:
            return _STOPPING
        if len(self._sessions) >= self.config.max_connections:
            return _BUSY
        self._sessions.add(session)
        self._no_sessions.clear()
        return None

    def release(self, session: _Connection) -> None:
        self._sessions.discard(session)
        if not self._sessions:
            self._no_sessions.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        # aiosmtpd logs every command line at INFO, an AUTH PLAIN's credentials
        # among them, and lines per connection: only its warnings reach the log.
        mail_log = logging.getLogger("mail.log")
        mail_log.setLevel(logging.WARNING)
        mail_log.addFilter(_QUIET_LOGINS)  # once: a filter already there is not added again
        loop = asyncio.get_running_loop()
        # socket.getfqdn may ask DNS: once, off the loop, not per connection.
        hostname = self.config.hostname or await anyio.to_thread.run_sync(socket.getfqdn)
        await self.handler.senders.start()
        factory = functools.partial(
            _Connection,
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
            await self.handler.idle.wait(self._grace)
        for session in list(self._sessions):
            session.say_goodbye(_STOPPING)
        # Each session ends as its connection is lost (aiosmtpd cancels its
        # task then); a hook it was in finishes as that cancellation lands.
        with anyio.move_on_after(self._grace):
            await self._no_sessions.wait()
            await self.handler.idle.wait()
