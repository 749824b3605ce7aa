"""What one client may hold of the hub's HTTP server: ``HttpLimits``, and the
open-files limit raised to match.

The figures are in docs/operations.md ("Security"). Each bounds something a
client could otherwise hold for ever: a head trickled byte by byte or never
sent (``head_timeout``), an endless header line growing in memory
(``max_head_bytes``), an idle keep-alive connection (``keep_alive``), and
connections or requests at once (``max_connections``: past it, 503 at once).
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

log = logging.getLogger("mailrun.hub.http")


@dataclass(frozen=True)
class HttpLimits:
    """What one client may hold of the HTTP server."""

    head_timeout: float = 10.0  # seconds from connecting (or from the last answer) to a full head
    keep_alive: float = 5  # seconds a connection may idle between requests
    max_head_bytes: int = 16 * 1024  # request line and headers
    max_connections: int = 2048  # open connections, or requests in flight; past it: 503
    graceful: float = 2.0  # seconds a shutdown waits for the answers in flight


def allow_open_files(needed: int) -> None:
    """Raise this process's soft limit on open files to ``needed`` (within the
    hard limit): the connection limit means nothing past the descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < needed:
        log.warning("open files limited to %d: fewer HTTP connections than configured", target)
