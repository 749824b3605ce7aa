"""The SMTP ingress's settings: ``--smtp HOST:PORT``, ``--smtp-cert``,
``--smtp-key``, the login from the environment, and the sender checks'
``--dns-server`` and ``--smtp-trusted-relay``.

The login comes from the environment, not from argv, which anyone on the
host can read: ``MAILRUN_SMTP_USER`` and ``MAILRUN_SMTP_PASSWORD`` (both or
neither). With them every client must log in (AUTH PLAIN or LOGIN) before
MAIL; AUTH is offered only after STARTTLS, so a login needs the
certificate too. A bind that other hosts can reach must have both: an open
SMTP port would let anyone on the network start runs, as an HTTP API
without its token would.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from runtime.config import HostPort, parse_host_port

from .._errors import SmtpConfigError

USER_ENV: Final = "MAILRUN_SMTP_USER"
PASSWORD_ENV: Final = "MAILRUN_SMTP_PASSWORD"

MAX_RECIPIENTS: Final = 100
"""Recipients of one message: each is a trigger of the message's one
transaction (``accept_mails`` takes up to 500)."""


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int  # 0: any free port (tests)
    cert_file: Path | None = None
    key_file: Path | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    max_recipients: int = MAX_RECIPIENTS
    max_message: int | None = None
    """Bytes of one message as sent (headers, every part, transfer-encoded);
    None: derived from the hub's ``max_body`` (:meth:`message_limit`)."""
    timeout: float = 300.0
    """Seconds a client may idle between commands, and take over DATA."""
    max_connections: int = 64
    """Sessions at once; each may buffer one message whole (aiosmtpd does)."""
    hostname: str | None = None
    """The name in the greeting (None: this host's fully qualified name)."""
    dns_server: HostPort | None = None
    """Where the sender checks look SPF, DKIM and DMARC records up (None:
    the system's resolver)."""
    trusted_relays: tuple[str, ...] = ()
    """Hosts (names or addresses) whose ``Authentication-Results`` the hub
    takes instead of checking their mail itself (docs/smtp.md)."""

    @property
    def address(self) -> str:
        return str(HostPort(self.host, self.port))

    @property
    def auth(self) -> bool:
        return self.username is not None

    @property
    def checks_senders(self) -> bool:
        """Whether DATA checks the sender (SPF, DKIM, DMARC, or a trusted
        relay's verdicts): when a resolver or a relay is named, or when the
        server takes mail from other hosts. A server bound to loopback alone
        takes no mail from the internet, and its mail is not held up by
        lookups a machine without DNS could not answer (``item.auth`` is
        None there; docs/smtp.md, "Who may write")."""
        return (
            self.dns_server is not None or bool(self.trusted_relays) or not is_loopback(self.host)
        )

    def message_limit(self, max_body: int) -> int:
        """The SIZE the server announces and enforces (552 past it): room for
        a body of ``max_body`` bytes base64-encoded, and some for the rest."""
        if self.max_message is not None:
            return self.max_message
        return max_body * 2 + 64 * 1024

    def tls_context(self) -> ssl.SSLContext | None:
        """The server's TLS context from the certificate and key, if given."""
        if self.cert_file is None or self.key_file is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise SmtpConfigError(
                f"--smtp-cert {self.cert_file} / --smtp-key {self.key_file}: {exc}"
            ) from None
        return context


def is_loopback(host: str) -> bool:
    """Only this host can connect: a loopback address or ``localhost``.
    A wildcard (``0.0.0.0``, ``::``) or a name is reachable from elsewhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def smtp_config(
    host_port: str,
    environ: Mapping[str, str],
    *,
    cert_file: Path | str | None = None,
    key_file: Path | str | None = None,
    allow_port_zero: bool = False,
    dns_server: str | None = None,
    trusted_relays: tuple[str, ...] = (),
) -> SmtpConfig:
    """The SMTP ingress at ``host_port``, with TLS from the files and the
    login from ``environ``; checked whole, before anything binds.

    Raises :class:`SmtpConfigError` naming the setting that is wrong."""
    try:
        host, port = parse_host_port(host_port, allow_port_zero=allow_port_zero)
    except ValueError as exc:
        raise SmtpConfigError(f"--smtp: {exc}") from None
    if (cert_file is None) != (key_file is None):
        raise SmtpConfigError("give both --smtp-cert and --smtp-key, or neither")
    username = environ.get(USER_ENV) or None
    password = environ.get(PASSWORD_ENV) or None
    if (username is None) != (password is None):
        raise SmtpConfigError(f"set both {USER_ENV} and {PASSWORD_ENV}, or neither")
    resolver = None
    if dns_server is not None:
        try:
            resolver = parse_host_port(dns_server)
            ipaddress.ip_address(resolver.host)  # a resolver is reached by its address
        except ValueError as exc:
            raise SmtpConfigError(f"--dns-server: {exc}") from None
    config = SmtpConfig(
        dns_server=resolver,
        trusted_relays=tuple(trusted_relays),
        host=host,
        port=port,
        cert_file=Path(cert_file).resolve() if cert_file is not None else None,
        key_file=Path(key_file).resolve() if key_file is not None else None,
        username=username,
        password=password,
    )
    if not is_loopback(host) and not config.auth:
        raise SmtpConfigError(
            f"--smtp {config.address} is reachable from other hosts: set {USER_ENV} and"
            f" {PASSWORD_ENV} (and --smtp-cert/--smtp-key), or bind a loopback address"
        )
    if config.auth and config.cert_file is None:
        # aiosmtpd offers AUTH only over TLS (auth_require_tls): without a
        # certificate nobody could ever log in, and every MAIL would be 530.
        raise SmtpConfigError(
            f"{USER_ENV} needs --smtp-cert and --smtp-key: AUTH is offered only after STARTTLS"
        )
    config.tls_context()  # a certificate that does not load fails here, not per client
    return config
