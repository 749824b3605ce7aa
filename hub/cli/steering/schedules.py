"""``mailrun schedule add|list|remove``: a deployment's schedules, each fire
a ``schedule`` item for its top-level run, over the hub's HTTP API.

A schedule fires every N seconds (``--every``, at least 1), or at the
times a cron expression names in a time zone (``--cron``, ``--tz``,
UTC by default). The hub checks it (422 ``invalid_schedule`` with the
reason, exit 1); a fire missed while the hub was down comes once, late.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click
import msgspec

from ..base import echo_json, hub_command
from ..tables import key_values, table

if TYPE_CHECKING:
    from ..._client import HubClient

_VIEW = ["id", "deployment_id", "every", "cron", "tz", "subject", "payload", "next_due"]


def schedule_view(s: Mapping[str, Any]) -> str:
    return key_values([(k, s.get(k)) for k in _VIEW if k in s])


def _when(s: Mapping[str, Any]) -> str:
    if s.get("cron") is not None:
        return f"cron {s['cron']} ({s.get('tz') or 'UTC'})"
    return f"every {s.get('every'):g}s"


def schedules_table(schedules: Sequence[Mapping[str, Any]]) -> str:
    return table(
        ["ID", "WHEN", "SUBJECT", "NEXT DUE"],
        [[s.get("id"), _when(s), s.get("subject"), s.get("next_due")] for s in schedules],
    )


@click.group()
def schedule() -> None:
    """Manage a deployment's schedules: items for its top-level run, on a clock."""


@schedule.command("add")
@click.argument("deployment", metavar="N")
@click.option("--every", type=float, metavar="SECONDS", help="Fire every SECONDS (at least 1).")
@click.option("--cron", metavar="EXPR", help='Fire at the times EXPR names ("0 9 * * 1-5").')
@click.option("--tz", metavar="ZONE", help="The zone --cron is read in (default UTC).")
@click.option("--subject", default="", help="The subject of each item (item.subject).")
@click.option("--payload", metavar="JSON", help="A JSON value each item carries.")
@hub_command
def add(
    deployment: str,
    every: float | None,
    cron: str | None,
    tz: str | None,
    subject: str,
    payload: str | None,
    *,
    client: HubClient,
    as_json: bool,
) -> None:
    """Add a schedule to deployment N (id or name); print it.

    Each fire is a `schedule` item for N's top-level run (started by the
    first one if it has none), its body the schedule's id, due and fired
    times, subject and payload."""
    spec: dict[str, object] = {"subject": subject}
    for key, value in (("every", every), ("cron", cron), ("tz", tz)):
        if value is not None:
            spec[key] = value
    if payload is not None:
        try:
            spec["payload"] = msgspec.json.decode(payload)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
    added = client.add_schedule(deployment, spec)
    if as_json:
        echo_json(added)
    else:
        click.echo(schedule_view(added))


@schedule.command("list")
@click.argument("deployment", metavar="N")
@hub_command
def list_(deployment: str, *, client: HubClient, as_json: bool) -> None:
    """List the schedules of deployment N, oldest first."""
    listing = client.schedules(deployment)
    if as_json:
        echo_json(listing)
    else:
        click.echo(schedules_table(listing.get("schedules") or []))


@schedule.command("remove")
@click.argument("deployment", metavar="N")
@click.argument("schedule_id", metavar="ID")
@hub_command
def remove(deployment: str, schedule_id: str, *, client: HubClient, as_json: bool) -> None:
    """Remove the schedule ID of deployment N: it fires no more; print it."""
    removed = client.remove_schedule(deployment, schedule_id)
    if as_json:
        echo_json(removed)
    else:
        click.echo(schedule_view(removed))


COMMANDS = (schedule,)
