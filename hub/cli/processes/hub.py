"""``mailrun hub`` (and ``python -m hub``): the hub process alone, its
settings read once from its options and its environment."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runtime import NATS_URL_ENV, private_umask, start_process
from runtime.config import (
    DEFAULT_HTTP,
    DEFAULT_MAIL_DOMAIN,
    DEFAULT_MAX_BODY,
    DEFAULT_NATS_URL,
    DEFAULT_REDELIVER_AFTER,
    DEFAULT_RUN_HISTORY,
    DEFAULT_SUBJECT_PREFIX,
    REDELIVER_AFTER_ENV,
    RUN_HISTORY_ENV,
    parse_host_port,
)

from ..._errors import HubError
from ..._token import read_token_file
from ..base import fail
from ..options import (
    database_option,
    dkim_options,
    domain_option,
    host_port,
    sender_check_options,
    smtp_options,
    smtp_relay_option,
)

if TYPE_CHECKING:
    from ...outbound import DkimSigner

_hub_log = logging.getLogger("mailrun.hub")


@click.command("hub")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--http",
    default=DEFAULT_HTTP,
    show_default=True,
    callback=functools.partial(host_port, allow_port_zero=True),
)
@click.option(
    "--http-fd",
    type=click.IntRange(min=0),
    help="Serve HTTP on this inherited, already listening socket instead of binding --http"
    " (`mailrun up` passes one, so its port stays held while the hub restarts; a systemd"
    " socket unit's works too).",
)
@click.option(
    "--smtp-fd",
    type=click.IntRange(min=0),
    help="The same for the SMTP ingress, which --smtp turns on.",
)
@click.option(
    "--nats",
    "nats_url",
    default=DEFAULT_NATS_URL,
    show_default=True,
    envvar=NATS_URL_ENV,
    help=f"NATS URL (env {NATS_URL_ENV}: `mailrun up` passes it there, never in argv).",
)
@click.option(
    "--sidecar-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write each new deployment's restore record under DIR/<deployment id>.",
)
@click.option("--subject-prefix", help=f"NATS subject prefix (default {DEFAULT_SUBJECT_PREFIX}).")
@click.option(
    "--max-body",
    type=click.IntRange(min=1),
    help=f"Largest mail body in bytes (default {DEFAULT_MAX_BODY}).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The file of the admin token (default: the one in the state dir, created at the"
    " first start); the hub does not start if it cannot read a token there.",
)
@click.option(
    "--redeliver-after",
    type=click.FloatRange(min=0, min_open=True),
    envvar=REDELIVER_AFTER_ENV,
    help=(
        "Send a dispatch again when it was delivered this many seconds ago and is still"
        f" not processed (default {DEFAULT_REDELIVER_AFTER:g}; env {REDELIVER_AFTER_ENV},"
        " which `mailrun up` passes on to its hub)."
    ),
)
@click.option(
    "--run-history",
    type=click.IntRange(min=0),
    envvar=RUN_HISTORY_ENV,
    help=(
        "Events of each run kept whole (a DispatchProcessed with its state, a MailSent with"
        " its body); older ones keep only their id (default"
        f" {DEFAULT_RUN_HISTORY}; env {RUN_HISTORY_ENV}, which `mailrun up` passes on)."
    ),
)
@domain_option
@database_option
@smtp_relay_option
@dkim_options
@smtp_options(allow_port_zero=True)
@sender_check_options
def hub_cmd(
    state_dir: Path,
    http: str,
    http_fd: int | None,
    smtp_fd: int | None,
    nats_url: str,
    sidecar_root: Path | None,
    subject_prefix: str | None,
    domains: tuple[str, ...],
    max_body: int | None,
    token_file: Path | None,
    redeliver_after: float | None,
    run_history: int | None,
    database: str | None,
    smtp_relay: str | None,
    dkim_keys: tuple[str, ...],
    dkim_selectors: tuple[str, ...],
    smtp: str | None,
    smtp_cert: Path | None,
    smtp_key: Path | None,
    dns_server: str | None,
    smtp_trusted_relays: tuple[str, ...],
) -> None:
    """Run the hub alone, in this process.

    Runs until SIGTERM/SIGINT; `mailrun up` runs it as a supervised child."""
    from ..._server import run_hub
    from ..._settings import HubSettings, wire_settings
    from ...outbound import relay_config
    from ...smtp import smtp_config

    if smtp is None and (smtp_cert is not None or smtp_key is not None):
        fail("--smtp-cert and --smtp-key need --smtp")
    if smtp is None and (dns_server is not None or smtp_trusted_relays):
        fail("--dns-server and --smtp-trusted-relay need --smtp")
    if smtp is None and smtp_fd is not None:
        fail("--smtp-fd needs --smtp")
    # The hub's settings: read here, from its options and its environment,
    # once; nothing it runs reads either again.
    private_umask()
    environ = os.environ
    try:
        process = start_process(environ)
        host, port = parse_host_port(http, allow_port_zero=True)
        ingress = None
        if smtp is not None:
            ingress = smtp_config(
                smtp,
                environ,
                cert_file=smtp_cert,
                key_file=smtp_key,
                allow_port_zero=True,
                dns_server=dns_server,
                trusted_relays=smtp_trusted_relays,
            )
        settings = HubSettings(
            state_dir=state_dir,
            http_host=host,
            http_port=port,
            http_fd=http_fd,
            smtp_fd=smtp_fd,
            nats_url=nats_url,
            sidecar_root=sidecar_root,
            subject_prefix=subject_prefix or DEFAULT_SUBJECT_PREFIX,
            domain=domains[0] if domains else DEFAULT_MAIL_DOMAIN,
            domains=domains[1:],
            max_body=max_body or DEFAULT_MAX_BODY,
            wire=wire_settings(redeliver_after=redeliver_after, run_history=run_history),
            admin_token=read_token_file(token_file) if token_file is not None else None,
            relay=relay_config(smtp_relay, environ) if smtp_relay else None,
            dkim=_signer(dkim_keys, dkim_selectors),
            smtp=ingress,
            database=database,
            process=process,
            environ=dict(environ),
        )
    except (HubError, ValueError) as exc:
        _hub_log.error("hub failed: %s", exc)
        raise SystemExit(1) from exc
    run_hub(settings)


def _signer(keys: tuple[str, ...], selectors: tuple[str, ...]) -> DkimSigner | None:
    """The hub's DKIM signer. Without ``--dkim-key`` nor ``--dkim-selector``
    there is nothing to read, and dkimpy with dnspython stays unimported
    (hub.outbound imports them when its DKIM names are first read)."""
    if not keys and not selectors:
        return None
    from ...outbound import dkim_signer

    return dkim_signer(keys, selectors)
