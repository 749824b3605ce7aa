"""Options several ``mailrun`` commands share: the state dir, the hub's
database, HOST:PORT addresses, the ports ``up`` chooses from, the mail
domains, and the SMTP ingress and relay, each checked before anything starts."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runtime.config import DEFAULT_MAIL_DOMAIN, parse_host_port

from .._errors import HubError
from .._token import DEFAULT_STATE_DIR
from ..up import PORTS_ENV, parse_ports
from .base import F, fail

if TYPE_CHECKING:
    from ..outbound import DkimKey

# The environment of hub.outbound (the relay's login), hub.smtp (the SMTP
# ingress's) and hub.store (the database), named here as they are there:
# importing those packages to read four names would cost every `mailrun`
# process the SMTP server, the relay and the store (docs/testing.md, "What
# the suite costs"); tests/hub/test_lazy_packages.py checks both agree.
RELAY_STARTTLS_ENV = "MAILRUN_SMTP_RELAY_STARTTLS"
RELAY_USER_ENV = "MAILRUN_SMTP_RELAY_USER"
RELAY_PASSWORD_ENV = "MAILRUN_SMTP_RELAY_PASSWORD"
SMTP_USER_ENV = "MAILRUN_SMTP_USER"
SMTP_PASSWORD_ENV = "MAILRUN_SMTP_PASSWORD"
DATABASE_ENV = "MAILRUN_DATABASE"


def host_port(
    ctx: click.Context, param: click.Parameter, value: str, *, allow_port_zero: bool = False
) -> str:
    """Check an ``--http`` HOST:PORT (passed on as given). Port 0, "let the OS
    choose", only for the process that binds it: ``up`` announces its address."""
    try:
        parse_host_port(value, allow_port_zero=allow_port_zero)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _optional_host_port(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    return None if value is None else host_port(ctx, param, value)


def _ports(ctx: click.Context, param: click.Parameter, value: str | None) -> range | None:
    if value is None or not value.strip():
        return None
    try:
        return parse_ports(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


ports_option = click.option(
    "--ports",
    metavar="LOW-HIGH",
    envvar=PORTS_ENV,
    callback=_ports,
    help="Choose the ports it picks itself (the embedded nats-server's) from these,"
    f" both included (env {PORTS_ENV}); default: 4222 when free, else a free one.",
)


_DOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
)


def _domains(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    domains = tuple(dict.fromkeys(d.strip().lower() for d in value))
    for domain in domains:
        if not _DOMAIN.fullmatch(domain):
            raise click.BadParameter(f"{domain!r} is not a mail domain")
    return domains


domain_option = click.option(
    "--domain",
    "domains",
    multiple=True,
    callback=_domains,
    help="A mail domain of this hub's deployments; repeat it for several. The first is"
    f" the default of new deployments (default {DEFAULT_MAIL_DOMAIN}); `mailrun deploy"
    " --domain D` picks another.",
)


smtp_relay_option = click.option(
    "--smtp-relay",
    metavar="HOST:PORT",
    callback=_optional_host_port,
    help="Send mail that runs address outside this hub through this SMTP relay"
    f" (STARTTLS and login: env {RELAY_STARTTLS_ENV}, {RELAY_USER_ENV}, {RELAY_PASSWORD_ENV}).",
)


def dkim_options(f: F) -> F:
    """``--dkim-key`` and ``--dkim-selector``, each repeatable (hub.outbound's
    ``_dkim``: one key for every domain, or ``DOMAIN=`` one per domain)."""
    f = click.option(
        "--dkim-selector",
        "dkim_selectors",
        multiple=True,
        metavar="[DOMAIN=]SELECTOR",
        help="The selector of --dkim-key (its DNS record: SELECTOR._domainkey.DOMAIN).",
    )(f)
    return click.option(
        "--dkim-key",
        "dkim_keys",
        multiple=True,
        metavar="[DOMAIN=]FILE",
        help="Sign outgoing mail with DKIM, with this RSA private key (PEM); with"
        " DOMAIN=, only mail from DOMAIN (repeatable). `mailrun dkim-record` prints"
        " its DNS record.",
    )(f)


def check_dkim(keys: tuple[str, ...], selectors: tuple[str, ...]) -> tuple[DkimKey, ...]:
    """Read the DKIM keys as the hub will, before anything starts."""
    if not keys and not selectors:
        return ()
    from ..outbound import dkim_keys

    try:
        return dkim_keys(keys, selectors)
    except HubError as exc:
        fail(f"{exc.reason}: {exc.detail}")


def smtp_options(*, allow_port_zero: bool) -> Callable[[F], F]:
    """``--smtp``, ``--smtp-cert``, ``--smtp-key`` (hub.smtp; the login is
    read from the environment, out of argv)."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        return host_port(ctx, param, value, allow_port_zero=allow_port_zero)

    file = click.Path(dir_okay=False, exists=True, resolve_path=True, path_type=Path)
    options = [
        click.option(
            "--smtp",
            metavar="HOST:PORT",
            callback=check,
            help="Take mail over SMTP here: each recipient a mail trigger (login: env"
            f" {SMTP_USER_ENV}, {SMTP_PASSWORD_ENV}; required unless HOST is loopback).",
        ),
        click.option("--smtp-cert", type=file, help="PEM certificate chain for STARTTLS."),
        click.option("--smtp-key", type=file, help="PEM private key of --smtp-cert."),
    ]

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def sender_check_options(f: F) -> F:
    """``--dns-server`` and ``--smtp-trusted-relay``: how the SMTP ingress
    checks who wrote a mail (docs/smtp.md, "Who may write")."""
    f = click.option(
        "--smtp-trusted-relay",
        "smtp_trusted_relays",
        metavar="HOST",
        multiple=True,
        help="An MTA in front of --smtp whose SPF/DKIM/DMARC verdicts (the results header it"
        " adds) are taken instead of the hub's own checks (repeatable; a name or an address).",
    )(f)
    return click.option(
        "--dns-server",
        metavar="ADDRESS:PORT",
        help="The DNS server the SMTP sender checks ask (default: the system's resolver).",
    )(f)


def check_smtp(
    smtp: str | None,
    cert: Path | None,
    key: Path | None,
    dns_server: str | None = None,
    trusted_relays: tuple[str, ...] = (),
) -> None:
    """Refuse, before anything starts, what the hub would refuse (``up`` would
    otherwise restart a hub that cannot start, for ever)."""
    if smtp is None:
        if cert is not None or key is not None:
            fail("--smtp-cert and --smtp-key need --smtp")
        if dns_server is not None or trusted_relays:
            fail("--dns-server and --smtp-trusted-relay need --smtp")
        return
    from ..smtp import smtp_config

    try:
        smtp_config(
            smtp,
            os.environ,
            cert_file=cert,
            key_file=key,
            allow_port_zero=True,
            dns_server=dns_server,
            trusted_relays=trusted_relays,
        )
    except HubError as exc:
        fail(f"{exc.reason}: {exc.detail}")


def check_database(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from ..store import is_database_url

    if not is_database_url(value):
        raise click.BadParameter("a postgresql:// URL (without it: the state dir's SQLite file)")
    return value


database_option = click.option(
    "--database",
    metavar="URL",
    envvar=DATABASE_ENV,
    callback=check_database,
    help="Keep the hub's data in this PostgreSQL database (postgresql://...) instead of"
    f" STATE_DIR/hub.db (env {DATABASE_ENV}: a URL with a password belongs there, not in"
    " argv).",
)


def state_dir_option(help_: str) -> Callable[[F], F]:
    """``--state-dir``, defaulting to the one the CLI looks in for the token too."""
    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_STATE_DIR,
        show_default=True,
        help=help_,
    )
