"""``mailrun producer add|list|remove``: the identities of the NATS mail ingress.

A producer is a program inside the cluster that sends mail over NATS
(``hub.IngressClient``) instead of HTTP. ``add`` prints its id, its ingress
subject and the seed of its NATS identity: the seed is shown this once
(the hub keeps only the public key), so hand it to the producer as a
secret. Under ``mailrun up`` the embedded server admits a new producer and
drops a removed one within a poll (0.5 s); an external server's operator
installs ``mailrun nats-config`` again after each add and remove.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from ..base import echo_json, hub_command
from ..tables import key_values, table

if TYPE_CHECKING:
    from ..._client import HubClient

_VIEW = ["id", "name", "status", "subject", "inbox_prefix", "nats_user", "created_at", "removed_at"]


def producer_view(p: Mapping[str, Any]) -> str:
    return key_values([(k, p.get(k)) for k in _VIEW if k in p])


def producers_table(producers: Sequence[Mapping[str, Any]]) -> str:
    return table(
        ["NAME", "ID", "STATUS", "SUBJECT", "CREATED"],
        [
            [p.get("name"), p.get("id"), p.get("status"), p.get("subject"), p.get("created_at")]
            for p in producers
        ],
    )


@click.group()
def producer() -> None:
    """Manage producers: programs that send mail over the NATS ingress."""


@producer.command("add")
@click.argument("name")
@hub_command
def add(name: str, *, client: HubClient, as_json: bool) -> None:
    """Add the producer NAME; print its id, subject and NATS seed (once).

    The producer connects to NATS with the seed, may publish only on its
    own subject and read replies only in its own inbox prefix, and may send
    to any deployment's address (as the admin token may)."""
    added = client.add_producer(name)
    if as_json:
        echo_json(added)
        return
    click.echo(producer_view(added))
    click.echo(f"seed          {added.get('seed')}")
    click.echo(
        "(secret, shown this once: the producer's NATS credentials. Connect with it,"
        " e.g. hub.IngressClient.connect(URL, producer_id=ID, seed=SEED).)"
    )


@producer.command("list")
@click.option("--all", "show_all", is_flag=True, help="Also the removed ones.")
@hub_command
def list_(show_all: bool, *, client: HubClient, as_json: bool) -> None:
    """List the active producers."""
    listing = client.producers(None if show_all else "active")
    if as_json:
        echo_json(listing)
    else:
        click.echo(producers_table(listing.get("producers") or []))


@producer.command("remove")
@click.argument("name")
@hub_command
def remove(name: str, *, client: HubClient, as_json: bool) -> None:
    """Remove a producer (by name or id): its identity is revoked.

    The hub refuses its batches at once; the server drops its user at its
    next reload (under `mailrun up`, within a poll)."""
    removed = client.remove_producer(name)
    if as_json:
        echo_json(removed)
    else:
        click.echo(producer_view(removed))
