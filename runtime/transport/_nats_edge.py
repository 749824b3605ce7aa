"""The edge between nats-py and the runtime: NATS URLs checked up front,
and nats-py's errors (and the socket's) as the runtime's transport errors.

Kept apart from the connection's life (``_nats_connection``) so that what a caller of
the transport may see raised is read in one place.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol
from urllib.parse import urlsplit

from ..config import redact_url
from ..errors import NoResponders, RequestTimeout, TransportClosed, TransportError
from ._natspy import errors as nats_errors


class _Closable(Protocol):
    @property
    def closed(self) -> bool: ...


def servers_of(url: str) -> list[str]:
    """The servers of ``url``: one, or a cluster's, comma-separated
    (``nats://a:4222,nats://b:4222``)."""
    return [part.strip() for part in url.split(",") if part.strip()]


def check_url(url: str) -> None:
    # Checked once up front: the connect loop would otherwise retry a typo forever.
    servers = servers_of(url)
    if not servers:
        raise TransportError("invalid NATS URL '': expected nats://host:port")
    for server in servers:
        try:
            parts = urlsplit(server)
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError as exc:
            raise TransportError(f"invalid NATS URL {redact_url(server)!r}: {exc}") from exc
        if parts.scheme not in ("nats", "tls", "ws", "wss") or not parts.hostname:
            raise TransportError(
                f"invalid NATS URL {redact_url(server)!r}: expected nats://host:port"
            )


def is_auth_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return isinstance(exc, nats_errors.AuthorizationError) or "authorization violation" in text


class AttemptFailed(Exception):
    """Ends one nats-py connect attempt so that our loop owns the retry."""


class mapped:  # lower case: used in ``with`` as contextlib's context managers are
    """Turn nats-py and socket errors into the runtime's transport errors:
    ``with mapped("publish to", transport, subject):``.

    A class, not a ``@contextmanager`` generator, and the text put together
    only when something is raised: every publish and request passes here (a
    lone mail, one each way in each process)."""

    __slots__ = ("_action", "_subject", "_transport")

    def __init__(self, action: str, transport: _Closable, subject: str = "") -> None:
        self._action = action
        self._transport = transport
        self._subject = subject

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            return
        what = f"{self._action} {self._subject}" if self._subject else self._action
        if isinstance(exc, nats_errors.NoRespondersError):
            raise NoResponders(f"{what}: no responders") from exc
        if isinstance(exc, nats_errors.ConnectionClosedError):
            if self._transport.closed:
                raise TransportClosed(f"{what}: connection closed") from exc
            # A client nats-py gave up on, until the keeper has replaced it.
            raise TransportError(f"{what}: not connected, reconnecting") from exc
        if isinstance(exc, TimeoutError):  # nats-py's TimeoutError is a builtin TimeoutError
            raise RequestTimeout(f"{what}: timed out") from exc
        if isinstance(exc, nats_errors.Error | OSError):
            raise TransportError(f"{what}: {exc}") from exc
