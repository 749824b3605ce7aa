"""What ``mailrun up`` runs with (``UpSettings``), what it announces once it
runs (``UpInfo``), and the URL it reaches its hub at."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from runtime.config import DEFAULT_HTTP, LOOPBACK, HostPort, parse_host_port

from ..processes import Backoff

DEFAULT_IDLE_STOP = 300.0
DEFAULT_MAX_AWAKE = 200
SIDECAR_START_ENV: Final = "MAILRUN_SIDECAR_START"
SIDECAR_STARTS: Final = ("fork", "exec")
SidecarStart = Literal["fork", "exec"]
DEFAULT_SIDECAR_START: Final[SidecarStart] = "fork" if sys.platform.startswith("linux") else "exec"
SIDECAR_JOIN_TIMEOUT_ENV: Final = "MAILRUN_SIDECAR_JOIN_TIMEOUT"
DEFAULT_SIDECAR_JOIN_TIMEOUT: Final = 60.0
"""Seconds from a sidecar's start to its Welcome: at load 20-27 on 2 cores a
start took up to 20-30 s (docs/operations.md, "A sidecar's start bound")."""


@dataclass(frozen=True)
class UpSettings:
    """What ``mailrun up`` runs with, read where it starts (its options and its
    environment), then handed down."""

    state_dir: Path
    http: str = DEFAULT_HTTP  # HOST:PORT; a fixed port, since up announces it
    nats_url: str | None = None
    # The embedded server's port: None takes one (hub/up/config/ports.py, from ``ports``).
    nats_port: int | None = None
    ports: range | None = None
    """``--ports``: the ports it chooses from when it picks one itself (the
    embedded nats-server's); None: 4222 when free, else a free one below the
    ephemeral ports."""
    subject_prefix: str | None = None
    domains: tuple[str, ...] = ()  # the hub's mail domains, passed on (the first: the default)
    smtp_relay: str | None = None  # HOST:PORT, passed on to the hub
    dkim: tuple[str, ...] = ()  # the hub's --dkim-key/--dkim-selector options, paths absolute
    smtp: str | None = None  # HOST:PORT of the hub's SMTP ingress
    smtp_cert: Path | None = None  # its STARTTLS certificate and key (absolute), passed on
    smtp_key: Path | None = None
    dns_server: str | None = None  # ADDRESS:PORT of the SMTP sender checks' resolver, passed on
    smtp_trusted_relays: tuple[str, ...] = ()  # passed on, one --smtp-trusted-relay each
    database: str | None = field(default=None, repr=False)  # the hub's, via its environment
    idle_stop: float = DEFAULT_IDLE_STOP
    """Seconds a sidecar it starts may idle before it falls asleep (its
    ``--idle-stop``); 0: always on, and asleep deployments are started."""
    max_awake: int = DEFAULT_MAX_AWAKE
    """With ``idle_stop``: at most this many sidecar processes of its own at
    once; further starts wait their turn (first come, first started)."""
    sidecar_start: SidecarStart = DEFAULT_SIDECAR_START
    """``fork``: sidecars are forked from a fork server ``up`` starts (which
    imported the sidecar once); ``exec``: each is a full ``python -m
    sidecar`` (and the fallback while the fork server is not running)."""
    sidecar_join_timeout: float = DEFAULT_SIDECAR_JOIN_TIMEOUT
    """Seconds a sidecar it starts has, from its spawn (or fork request) to
    its Welcome, before it is killed and started again; 0: no bound."""
    wake_wait: float = 10.0  # the long poll of GET /workflows/wakes
    poll_interval: float = 0.5
    stop_grace: float = 5.0
    backoff: Backoff = field(default_factory=Backoff)
    nats_ready_timeout: float = 15.0
    hub_ready_timeout: float = 60.0
    request_timeout: float = 2.0
    say: Callable[[str], None] | None = None
    environ: Mapping[str, str] = field(kw_only=True, repr=False)
    """Its environment, which its children inherit (the relay's and the SMTP
    ingress's logins among it: never in ``repr``)."""

    def __post_init__(self) -> None:
        if not self.idle_stop >= 0:
            raise ValueError(f"idle_stop must be 0 or more seconds, not {self.idle_stop}")
        if self.sidecar_start not in SIDECAR_STARTS:
            raise ValueError(f"sidecar_start must be fork or exec, not {self.sidecar_start!r}")
        if not self.sidecar_join_timeout >= 0:
            raise ValueError(
                f"sidecar_join_timeout must be 0 or more seconds, not {self.sidecar_join_timeout}"
            )
        if self.max_awake < 1:
            raise ValueError(f"max_awake must be at least 1, not {self.max_awake}")

    def hub_options(self) -> list[str]:
        """The hub's command-line options that come from these settings, after
        its ``--state-dir``, ``--http`` and ``--sidecar-root`` (logins stay in
        the environment it inherits, out of argv, which anyone can read)."""
        argv: list[str] = []
        if self.subject_prefix:
            argv += ["--subject-prefix", self.subject_prefix]
        for domain in self.domains:
            argv += ["--domain", domain]
        if self.smtp_relay:
            argv += ["--smtp-relay", self.smtp_relay]
        argv += self.dkim
        if self.smtp:
            argv += ["--smtp", self.smtp]
            for flag, path in (("--smtp-cert", self.smtp_cert), ("--smtp-key", self.smtp_key)):
                if path is not None:
                    argv += [flag, str(path)]
            if self.dns_server:
                argv += ["--dns-server", self.dns_server]
            for relay in self.smtp_trusted_relays:
                argv += ["--smtp-trusted-relay", relay]
        return argv

    @property
    def sleeps(self) -> bool:
        """Whether its sidecars fall asleep when idle (scale to zero)."""
        return self.idle_stop > 0


@dataclass(frozen=True)
class UpInfo:
    pid: int
    http: str  # the URL the hub answers on
    nats_url: str  # as shown: without credentials
    state_dir: Path
    admin_token: str = field(repr=False)
    token_created: bool  # by this start: the first of this state dir

    @property
    def console_url(self) -> str:
        """The URL that logs a browser in (it holds the token)."""
        return f"{self.http}/?token={self.admin_token}"


def hub_url(http: str) -> str:
    """The URL to reach a hub listening on ``H:P`` (a wildcard host means loopback)."""
    host, port = parse_host_port(http)
    host = {"0.0.0.0": LOOPBACK, "::": "::1"}.get(host, host)
    return f"http://{HostPort(host, port)}"
