"""The deployment's mail settings as ``mailrun deploy`` takes them: whom it
takes mail from (``--allow-from``, ``--deny-from``, ``--require-dmarc``),
what a reply to an ended run meets (``--replies-to-ended``) and whether it
takes its domain's unknown addresses (``--catch-all``). Sent to the hub as
the deployment's ``mail``, only the ones given: at create the others keep
their defaults; with ``--update`` their values (a list given replaces the
one in force)."""

from __future__ import annotations

from typing import Any

import click

from ..base import F

_REPLIES_TO_ENDED = ("top_level", "refuse")


def mail_options(fn: F) -> F:
    """``--allow-from``, ``--deny-from``, ``--require-dmarc``, ``--replies-to-ended``,
    ``--catch-all``."""
    options = [
        click.option(
            "--catch-all/--no-catch-all",
            default=None,
            help="Take mail to any address of its domain that no deployment has.",
        ),
        click.option(
            "--replies-to-ended",
            type=click.Choice(_REPLIES_TO_ENDED),
            help="A reply to a run that has ended: to the top-level run (default), or refused.",
        ),
        click.option(
            "--require-dmarc/--no-require-dmarc",
            default=None,
            help="Take SMTP mail only when its sender's DMARC check passes.",
        ),
        click.option(
            "--deny-from",
            metavar="PATTERN",
            multiple=True,
            help="Refuse mail from senders matching PATTERN ('*@example.com'; repeatable).",
        ),
        click.option(
            "--allow-from",
            metavar="PATTERN",
            multiple=True,
            help="Take mail only from senders matching PATTERN ('*@example.com'; repeatable).",
        ),
    ]
    for option in options:
        fn = option(fn)
    return fn


def mail_settings(
    *,
    allow_from: tuple[str, ...] = (),
    deny_from: tuple[str, ...] = (),
    require_dmarc: bool | None = None,
    replies_to_ended: str | None = None,
    catch_all: bool | None = None,
    **_others: Any,
) -> dict[str, Any]:
    """The mail settings given on the command line (the others unset)."""
    given: dict[str, Any] = {}
    if allow_from:
        given["allow_from"] = list(allow_from)
    if deny_from:
        given["deny_from"] = list(deny_from)
    for name, value in (
        ("require_dmarc", require_dmarc),
        ("replies_to_ended", replies_to_ended),
        ("catch_all", catch_all),
    ):
        if value is not None:
            given[name] = value
    return given
