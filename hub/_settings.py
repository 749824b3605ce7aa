"""HubSettings: everything a hub process runs with, read once where it starts
and handed down.

``mailrun hub`` (and ``python -m hub``) builds it from its options and its
environment (hub.cli); nothing below reads either. Tests build one directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runtime import ProcessSettings
from runtime.config import (
    DEFAULT_HTTP_PORT,
    DEFAULT_MAIL_DOMAIN,
    DEFAULT_MAX_BODY,
    DEFAULT_NATS_URL,
    DEFAULT_SUBJECT_PREFIX,
    LOOPBACK,
)

from .api import EventLimits, HttpLimits
from .store import DEFAULT_BUSY_TIMEOUT
from .wire import DispatchConfig, RetentionConfig, WireConfig

if TYPE_CHECKING:
    # Named only in annotations: settings without a relay, a DKIM key or an
    # SMTP ingress do not import what runs them.
    from .outbound import DkimSigner, RelayConfig
    from .smtp import SmtpConfig


@dataclass(frozen=True)
class HubSettings:
    state_dir: Path
    http_host: str = LOOPBACK
    http_port: int = DEFAULT_HTTP_PORT  # 0: any free port (see HubHandle.http_url)
    http_fd: int | None = None
    """An inherited listening socket to serve HTTP on instead of binding
    ``http_host:http_port`` (``--http-fd``; hub._listeners)."""
    smtp_fd: int | None = None
    """The same for the SMTP ingress (``--smtp-fd``), which ``smtp`` turns on."""
    nats_url: str = DEFAULT_NATS_URL
    sidecar_root: Path | None = None
    subject_prefix: str = DEFAULT_SUBJECT_PREFIX
    domain: str = DEFAULT_MAIL_DOMAIN
    """The mail domain of new deployments, unless their creation names another."""
    domains: tuple[str, ...] = ()
    """The hub's other mail domains (``--domain`` repeated): a deployment may be made in one."""
    max_body: int = DEFAULT_MAX_BODY
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    wire: WireConfig = field(default_factory=WireConfig)
    # None: the state dir's admin-token file, created at the first start.
    admin_token: str | None = field(default=None, repr=False)
    http_limits: HttpLimits = field(default_factory=HttpLimits)
    events: EventLimits = field(default_factory=EventLimits)
    """``GET /events``: streams at once, each one's buffer, the poll interval."""
    relay: RelayConfig | None = None
    """Where mail to outside addresses goes (None: it stays ``no_relay``)."""
    dkim: DkimSigner | None = None
    """The DKIM keys that sign it (``--dkim-key``; None: it leaves unsigned).
    Their keys are not in ``repr``."""
    smtp: SmtpConfig | None = None
    """The SMTP ingress (``--smtp``); None: no SMTP server."""
    database: str | None = field(default=None, repr=False)
    """A ``postgresql://`` URL (``--database``); None: ``state_dir/hub.db``.
    Not in ``repr``: it may carry a password."""
    process: ProcessSettings = field(default_factory=ProcessSettings)
    """Its log level, event loop, the cap on its retry delays
    (``MAILRUN_BACKOFF_MAX``: how tests and soaks compress time) and SQLite's
    synchronous level."""
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The environment the hub started with, from which a replay's scratch
    process gets a sidecar's (``hub.api``'s ``scratch_env``). Not in
    ``repr``: it may hold secrets."""

    @property
    def backoff_max(self) -> float | None:
        """Caps the delays of the hub's retry loops (NATS, delivery rounds, the relay)."""
        return self.process.backoff_max


def wire_settings(
    *, redeliver_after: float | None = None, run_history: int | None = None
) -> WireConfig:
    """The wire side's settings with ``--redeliver-after`` and ``--run-history``
    (None: their defaults)."""
    wire = WireConfig()
    if redeliver_after is not None:
        wire = dataclasses.replace(wire, dispatch=DispatchConfig(redeliver_after=redeliver_after))
    if run_history is not None:
        wire = dataclasses.replace(wire, retention=RetentionConfig(run_history=run_history))
    return wire
