"""Defaults every part agrees on, and the one ``HOST:PORT`` parser.

The hub, the sidecar, ``mailrun up`` and the CLI each need some of these (the
sidecar its NATS URL and subject prefix, the CLI the hub's URL); they live
here so that a default changes in one place. Nothing here opens a socket or
reads the environment: the names of the variables that override a default are
here, reading them is the caller's business.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final, NamedTuple

LOOPBACK: Final = "127.0.0.1"

DEFAULT_HTTP_PORT: Final = 8470
DEFAULT_HTTP: Final = f"{LOOPBACK}:{DEFAULT_HTTP_PORT}"
DEFAULT_HUB_URL: Final = f"http://{DEFAULT_HTTP}"
HUB_URL_ENV: Final = "MAILRUN_HUB"

DEFAULT_NATS_PORT: Final = 4222
DEFAULT_NATS_URL: Final = f"nats://{LOOPBACK}:{DEFAULT_NATS_PORT}"
DEFAULT_SUBJECT_PREFIX: Final = "mailrun"
# The NATS URL may carry credentials (nats://user:password@host): processes
# pass it to each other in this variable, never in argv, which any local user
# can read (/proc/PID/cmdline), and show it only through redact_url.
NATS_URL_ENV: Final = "MAILRUN_NATS_URL"

DEFAULT_MAIL_DOMAIN: Final = "mailrun.local"
DEFAULT_MAX_BODY: Final = 16 * 1024 * 1024

# Seconds a dispatch may stay delivered and unprocessed before the hub sends it again.
DEFAULT_REDELIVER_AFTER: Final = 30.0
REDELIVER_AFTER_ENV: Final = "MAILRUN_REDELIVER_AFTER"

# Events of each run whose payload (a DispatchProcessed's state snapshot, a
# MailSent's body) the hub keeps; older ones keep only their id.
DEFAULT_RUN_HISTORY: Final = 16
RUN_HISTORY_ENV: Final = "MAILRUN_RUN_HISTORY"

LOG_LEVEL_ENV: Final = "MAILRUN_LOG_LEVEL"
DEFAULT_LOG_LEVEL: Final = "INFO"

# Seconds: no retry loop of a hub or sidecar process waits longer than this
# between attempts (each loop's own cap is 1 or 2 s). Lowered only to compress
# time in tests and soaks: every attempt still happens, sooner.
BACKOFF_MAX_ENV: Final = "MAILRUN_BACKOFF_MAX"

# FULL (the default) or NORMAL: how both SQLite stores sync their commits.
# NORMAL exists only to measure what durable acknowledgements cost
# (bench/mail/bench_e2e.py --synchronous normal): under it an OS crash or a power
# cut can take back a 202 receipt or a stored Ack (runtime/_sqlite.py).
SQLITE_SYNCHRONOUS_ENV: Final = "MAILRUN_SQLITE_SYNCHRONOUS"

# uvloop (the default) or asyncio: the event loop of hub, sidecar and `up`
# processes (runtime/loops/_eventloop.py).
LOOP_ENV: Final = "MAILRUN_LOOP"


class SidecarExit(IntEnum):
    """A sidecar process's exit codes that mean something to its supervisor
    (``mailrun up`` starts sidecars as programs and imports none of them).

    A sidecar runs its workflow's code, which may end the process with any
    code at all (``os._exit(3)``): so before it exits with a code that says
    "do not start me again" it writes its pid to :data:`FINAL_EXIT_NOTE` in
    its state dir, and its supervisor believes the code only with that note
    (anything else is a crash, restarted)."""

    USAGE = 2
    """It cannot boot: no restore record, or one it cannot read."""
    OWNER_CONFLICT = 3
    """Another process owns the deployment or runs from this directory, or the
    deployment moved away from this process: not restarted."""
    DELETED = 4
    """The deployment was deleted: not restarted."""
    ASLEEP = 5
    """The hub granted its Sleep: not restarted until the deployment has work
    again (``mailrun up`` wakes it)."""


FINAL_EXIT_NOTE: Final = "final-exit.pid"
"""In a sidecar's state dir: the pid of the process that exited with a final
:class:`SidecarExit` code on purpose (the code alone may be the workflow's)."""


class HostPort(NamedTuple):
    """A TCP address as ``--http`` takes it; ``str()`` writes it back the same way."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_host_port(text: str, *, allow_port_zero: bool = False) -> HostPort:
    """``"127.0.0.1:8470"``, ``"hub.internal:80"``, ``"[::1]:8470"`` -> HostPort.

    HOST is a name, an IPv4 address or an IPv6 address in brackets; it cannot
    be left out. PORT is 1-65535. Port 0 means "let the OS choose" and makes
    sense only to the process that binds the address, so only a caller that
    binds passes ``allow_port_zero``; one that must know the port before the
    server starts (``mailrun up`` announces its hub's address) refuses it.

    Raises ``ValueError`` with a message that names ``HOST:PORT``.
    """
    host, sep, port = text.rpartition(":")
    lowest = 0 if allow_port_zero else 1
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"expected HOST:PORT with an IPv6 host in brackets, got {text!r}")
    if not sep or not host or "[" in host or "]" in host:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if not (port.isascii() and port.isdigit()) or not lowest <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT with a port from {lowest} to 65535, got {text!r}")
    return HostPort(host, int(port))


def redact_url(url: str) -> str:
    """``url`` without its userinfo, for showing and logging it.

    ``nats://user:password@host:4222`` -> ``nats://host:4222``. Everything up
    to the last ``@`` of the authority goes, so a password with an unescaped
    ``/`` or ``@`` in it goes too; a comma-separated server list is redacted
    server by server.
    """
    return ",".join(_redact_one(part) for part in url.split(","))


def _redact_one(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        rest = rest.rpartition("@")[2]
    return f"{scheme}{sep}{rest}"


__all__ = [
    "BACKOFF_MAX_ENV",
    "DEFAULT_HTTP",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_HUB_URL",
    "DEFAULT_LOG_LEVEL",
    "DEFAULT_MAIL_DOMAIN",
    "DEFAULT_MAX_BODY",
    "DEFAULT_NATS_PORT",
    "DEFAULT_NATS_URL",
    "DEFAULT_REDELIVER_AFTER",
    "DEFAULT_RUN_HISTORY",
    "DEFAULT_SUBJECT_PREFIX",
    "FINAL_EXIT_NOTE",
    "HUB_URL_ENV",
    "LOG_LEVEL_ENV",
    "LOOPBACK",
    "LOOP_ENV",
    "NATS_URL_ENV",
    "REDELIVER_AFTER_ENV",
    "RUN_HISTORY_ENV",
    "SQLITE_SYNCHRONOUS_ENV",
    "HostPort",
    "SidecarExit",
    "parse_host_port",
    "redact_url",
]
