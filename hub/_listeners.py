"""The hub's listening sockets (HTTP, SMTP): bound by the hub itself, or
inherited already listening from the process that started it.

``mailrun up`` binds the hub's ports once and hands them to each hub it
starts (``--http-fd``, ``--smtp-fd``), so the port stays held while a hub
restarts: no other process can take it, and clients that connect in that
gap wait in the kernel's queue for the next hub instead of being refused.
A systemd socket unit's descriptors serve the same way. Light on purpose:
``up`` imports this and nothing of the HTTP server.
"""

from __future__ import annotations

import errno
import socket

from ._errors import ListenerUnusable, PortInUse

BACKLOG = 512
"""Connections the kernel queues before they are accepted."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port``. ``SO_REUSEADDR``: a port whose
    last listener left connections in TIME_WAIT, as a hub just stopped does,
    is free again at once. ``PortInUse`` when another socket listens there."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"{host}:{port} is in use: another process listens there") from exc
            raise
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def inherited_socket(fd: int) -> socket.socket:
    """The listening TCP socket open on descriptor ``fd``, which this
    process inherited. ``ListenerUnusable`` when ``fd`` is not one: a wrong
    number must fail the start, not serve nothing."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ListenerUnusable(f"descriptor {fd} is not an open socket: {exc}") from exc
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            raise ListenerUnusable(f"descriptor {fd} is not a TCP socket")
        if not listening:
            raise ListenerUnusable(f"descriptor {fd} is a TCP socket that does not listen")
    except BaseException:
        sock.detach()  # not ours to close: the descriptor stays as it was
        raise
    # Inherited descriptors are inheritable; this process's children (a
    # replay's scratch process, say) must not hold the hub's port.
    sock.set_inheritable(False)
    return sock


def listening_socket(fd: int | None, host: str, port: int) -> socket.socket:
    """The inherited socket on ``fd`` when there is one, else one bound on
    ``host:port``."""
    return inherited_socket(fd) if fd is not None else bind_socket(host, port)
