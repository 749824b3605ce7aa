"""The relay's settings: ``--smtp-relay HOST:PORT`` and the environment.

STARTTLS and login come from the environment, not from argv, which anyone on
the host can read: ``MAILRUN_SMTP_RELAY_STARTTLS=1`` requires STARTTLS (the
relay's certificate is verified, against ``MAILRUN_SMTP_RELAY_CA_FILE`` when
set, else the system's CAs); ``MAILRUN_SMTP_RELAY_USER`` and
``MAILRUN_SMTP_RELAY_PASSWORD`` log in (both or neither). ``mailrun up``
passes its environment to the hub; sidecars never get it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from runtime import Backoff
from runtime.config import parse_host_port

from .._errors import RelayConfigError

STARTTLS_ENV: Final = "MAILRUN_SMTP_RELAY_STARTTLS"
USER_ENV: Final = "MAILRUN_SMTP_RELAY_USER"
PASSWORD_ENV: Final = "MAILRUN_SMTP_RELAY_PASSWORD"
CA_FILE_ENV: Final = "MAILRUN_SMTP_RELAY_CA_FILE"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


@dataclass(frozen=True)
class RelayConfig:
    host: str
    port: int
    starttls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    timeout: float = 30.0
    """Seconds for the connection and for each SMTP command."""
    batch: int = 32
    """Mails sent over one connection before the loop looks again."""
    backoff: Backoff = Backoff(0.5, 300.0)
    """Between attempts: a relay away for days is tried every five minutes."""
    local_hostname: str | None = None
    """The name said in EHLO (None: this host's fully qualified name)."""

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def relay_config(host_port: str, environ: Mapping[str, str]) -> RelayConfig:
    """The relay at ``host_port``, with STARTTLS and login from ``environ``.

    Raises :class:`RelayConfigError` naming the setting that is wrong."""
    try:
        host, port = parse_host_port(host_port)
    except ValueError as exc:
        raise RelayConfigError(f"--smtp-relay: {exc}") from None
    flag = environ.get(STARTTLS_ENV, "").strip().lower()
    if flag not in _TRUE | _FALSE:
        raise RelayConfigError(f"{STARTTLS_ENV} must be 1 or 0, got {flag!r}")
    username = environ.get(USER_ENV) or None
    password = environ.get(PASSWORD_ENV) or None
    if (username is None) != (password is None):
        raise RelayConfigError(f"set both {USER_ENV} and {PASSWORD_ENV}, or neither")
    return RelayConfig(
        host=host,
        port=port,
        starttls=flag in _TRUE,
        username=username,
        password=password,
        ca_file=environ.get(CA_FILE_ENV) or None,
    )
