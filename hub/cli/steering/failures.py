"""``mailrun resume RUN``, ``mailrun parked`` and ``mailrun retry DISPATCH``
(the failure policy's options of ``mailrun deploy`` are beside it).

A deployment's policy says what becomes of an item whose handler keeps
failing (docs/operations.md, "When a handler fails"): its run is suspended
until resumed, or the item is parked until retried, or the run fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..base import echo_json, hub_command
from ..tables import parked_table, run_view

if TYPE_CHECKING:
    from ..._client import HubClient


@click.command()
@click.argument("run_id", metavar="RUN")
@hub_command
def resume(run_id: str, *, client: HubClient, as_json: bool) -> None:
    """Resume the suspended run RUN; print it.

    Its held items come next, the one that failed first, processed by the
    active version (a new version resumes every suspended run by itself)."""
    found = client.resume(run_id)
    if as_json:
        echo_json(found)
    else:
        click.echo(run_view(found))


@click.command()
@click.option("--deployment", help="Only this deployment's (id or name).")
@hub_command
def parked(deployment: str | None, *, client: HubClient, as_json: bool) -> None:
    """List parked dispatches (the latest 100, newest first) with their error."""
    listing = client.parked(deployment)
    if as_json:
        echo_json(listing)
    else:
        click.echo(parked_table(listing.get("dispatches") or []))


@click.command()
@click.argument("dispatch_id", metavar="DISPATCH")
@hub_command
def retry(dispatch_id: str, *, client: HubClient, as_json: bool) -> None:
    """Send the parked dispatch DISPATCH to its run again (after the items
    accepted so far); print it."""
    found = client.retry(dispatch_id)
    if as_json:
        echo_json(found)
    else:
        click.echo(parked_table([found]))


COMMANDS = (resume, parked, retry)
