"""``mailrun dkim-record``: what the hub's ``--dkim-key`` needs before it
starts, the DNS TXT record that publishes the key, and with ``--generate``
the key itself (docs/smtp.md, "DKIM")."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import click

from ..._errors import HubError
from ..base import fail

_DOMAIN = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+\.?")
_SELECTOR = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def _check(pattern: re.Pattern[str], what: str) -> Callable[..., str]:
    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        if pattern.fullmatch(value) is None:
            raise click.BadParameter(f"{value!r} is not a {what}")
        return value

    return check


@click.command("dkim-record")
@click.option(
    "--dkim-key",
    "key_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The RSA private key (PEM) the hub signs with (its --dkim-key FILE).",
)
@click.option(
    "--dkim-selector",
    "selector",
    required=True,
    callback=_check(_SELECTOR, "selector (a DNS name)"),
    help="Its selector (the hub's --dkim-selector).",
)
@click.option(
    "--domain",
    required=True,
    callback=_check(_DOMAIN, "domain name"),
    help="The sending domain: the domain of the deployments' addresses.",
)
@click.option(
    "--generate",
    is_flag=True,
    help="Write a new 2048-bit RSA key to FILE first (mode 0600) if there is none.",
)
def dkim_record(key_file: Path, selector: str, domain: str, generate: bool) -> None:
    """Print the DNS TXT record to publish for a DKIM key.

    The record is SELECTOR._domainkey.DOMAIN in zone-file form, its value
    split in strings of at most 255 bytes. Publish it, then start the hub (or
    `mailrun up`) with --dkim-key FILE --dkim-selector SELECTOR."""
    from ...outbound import dns_record, generate_key, read_key

    try:
        if generate and generate_key(key_file):
            click.echo(f"mailrun dkim-record: wrote a new key to {key_file}", err=True)
        pem = read_key(key_file)
    except HubError as exc:
        fail(f"{exc.reason}: {exc.detail}")
    click.echo(dns_record(pem, selector, domain))
