"""``mailrun cancel RUN``, ``mailrun pause N`` and ``mailrun unpause N``: a
run or a deployment stopped from outside, over the hub's HTTP API.

A cancel ends a run ``cancelled``: its handler sees a ``cancel`` item first
(``--terminate``: it ends at once, unseen). A pause keeps what a deployment
takes (accepted, not delivered) until it is unpaused (docs/operations.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..base import echo_json, hub_command
from ..tables import deployment_view, receipt_view

if TYPE_CHECKING:
    from ..._client import HubClient


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--reason", help="Why: the handler's item.reason and the run's error.")
@click.option(
    "--terminate",
    is_flag=True,
    help="End the run at once, without its handler seeing the cancel.",
)
@hub_command
def cancel(
    run_id: str, reason: str | None, terminate: bool, *, client: HubClient, as_json: bool
) -> None:
    """Cancel the run RUN (and its live children); print the receipt.

    Its handler gets a `cancel` item ahead of what the run holds, and the run
    ends cancelled once that item is processed, whatever the handler did.
    A second cancel of RUN gets the first one's receipt."""
    receipt = client.cancel(run_id, reason, terminate=terminate)
    if as_json:
        echo_json(receipt)
    else:
        click.echo(receipt_view(receipt))


@click.command()
@click.argument("deployment", metavar="N")
@hub_command
def pause(deployment: str, *, client: HubClient, as_json: bool) -> None:
    """Pause deployment N (id or name); print it.

    Its mail and every other trigger are still accepted, and kept: none is
    delivered until it is unpaused (what its sidecar has already got is
    processed)."""
    found = client.pause(deployment)
    if as_json:
        echo_json(found)
    else:
        click.echo(deployment_view(found))


@click.command()
@click.argument("deployment", metavar="N")
@hub_command
def unpause(deployment: str, *, client: HubClient, as_json: bool) -> None:
    """Unpause deployment N (id or name): what it kept goes out, in order; print it."""
    found = client.unpause(deployment)
    if as_json:
        echo_json(found)
    else:
        click.echo(deployment_view(found))


COMMANDS = (cancel, pause, unpause)
