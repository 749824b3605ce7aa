"""The CLI commands that operate a hub over its HTTP API: deploy, send,
list and inspect, signal and approve, versions and rollbacks.

Each is a :func:`~hub.cli.base.hub_command` (``--hub``, ``--token-file``,
``--json``, the error contract); human output is tables and key/value
blocks (``tables``).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
import msgspec

from ..base import echo_json, fail, hub_command
from ..steering import mail_options, mail_settings, policy_options, policy_settings
from ..tables import (
    approvals_table,
    deployment_view,
    deployments_table,
    outbox_table,
    receipt_view,
    run_view,
    runs_table,
    version_line,
    versions_table,
)

if TYPE_CHECKING:
    from ..._client import HubClient


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="Unique name; the address is NAME@<domain>.")
@click.option(
    "--domain",
    help="One of the hub's mail domains (`--domain` of `mailrun up`/`hub`; default its first).",
)
@click.option("--entrypoint", help="module:attr (default flow:main; FILE is saved as module).")
@click.option(
    "--join-token",
    "show_token",
    is_flag=True,
    help="Also print the join token (it holds the deployment's private key).",
)
@click.option(
    "--update",
    is_flag=True,
    help="Add FILE as a new version of the live deployment NAME (same id, address and runs).",
)
@policy_options
@mail_options
@hub_command
def deploy(
    file: Path,
    name: str,
    domain: str | None,
    entrypoint: str | None,
    show_token: bool,
    update: bool,
    *,
    client: HubClient,
    as_json: bool,
    **policy: Any,
) -> None:
    """Deploy a workflow; print it (and, with --join-token, its join token).

    FILE is saved as the entrypoint's module (flow.py unless --entrypoint).
    Under `mailrun up` the sidecar starts by itself; the join token is only
    for a sidecar on another host, so it is printed only when asked for.
    With --update, FILE becomes the next version of deployment NAME once its
    sidecar has loaded it (a version that does not load is refused, and the
    active one keeps running). The failure policy's and the mail settings'
    options set them at create; with --update, the ones given change them
    (a --allow-from or --deny-from list given replaces the one in force)."""
    settings = policy_settings(**policy)
    if mail := mail_settings(**policy):
        settings["mail"] = mail
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}")
    if update and domain:
        fail("--domain is the address's: it is set when a deployment is made, not by --update")
    if update:
        if settings:
            client.set_policy(name, settings)
        version = client.add_version(name, source, entrypoint)
        if as_json:
            echo_json(version)
        else:
            click.echo(version_line(version))
        return
    dep = client.deploy(name, source, entrypoint, settings, domain)
    token = dep.pop("join_token", None)
    if as_json:
        echo_json({**dep, "join_token": token} if show_token else dep)
        return
    click.echo(deployment_view(dep))
    if show_token and token:
        click.echo(f"join token  {token}")
        click.echo(
            "(secret: it holds the deployment's private key. On another host run "
            "`mailrun sidecar --state-dir DIR --join TOKEN` once.)"
        )


@click.command()
@click.argument("address")
@click.option("--subject", required=True)
@click.option("--body", help="The body as text.")
@click.option("--body-file", type=click.File("rb"), help="The body from a file ('-': stdin).")
@click.option(
    "--message-id",
    help="Makes the send idempotent: a retry gets the first receipt; the same id with"
    " another subject, body or sender is refused (message_id_reused).",
)
@click.option("--from", "sender", help="The sender's address.")
@hub_command
def send(
    address: str,
    subject: str,
    body: str | None,
    body_file: IO[bytes] | None,
    message_id: str | None,
    sender: str | None,
    *,
    client: HubClient,
    as_json: bool,
) -> None:
    """Send a mail to ADDRESS; print the receipt."""
    if body is not None and body_file is not None:
        raise click.UsageError("give --body or --body-file, not both")
    data = body_file.read() if body_file is not None else (body or "").encode()
    receipt = client.send_mail(address, subject, data, message_id=message_id, sender=sender)
    click.echo(msgspec.json.encode(receipt).decode() if as_json else receipt_view(receipt))


@click.command()
@hub_command
def deployments(*, client: HubClient, as_json: bool) -> None:
    """List deployments."""
    listing = client.deployments()
    if as_json:
        echo_json(listing)
    else:
        click.echo(deployments_table(listing.get("deployments") or []))


@click.command()
@click.option("--deployment", help="Only this deployment's runs (id or name).")
@hub_command
def runs(deployment: str | None, *, client: HubClient, as_json: bool) -> None:
    """List runs."""
    listing = client.runs(deployment)
    if as_json:
        echo_json(listing)
    else:
        click.echo(runs_table(listing.get("runs") or []))


@click.command()
@click.option(
    "--status",
    type=click.Choice(["pending", "sending", "sent", "failed", "no_relay"]),
    help="Only mail in this status.",
)
@click.option("--deployment", help="Only this deployment's mail (id or name).")
@hub_command
def outbox(status: str | None, deployment: str | None, *, client: HubClient, as_json: bool) -> None:
    """List mail that runs sent to outside addresses, with its status.

    Sent through the hub's --smtp-relay; without one it stays no_relay."""
    listing = client.outbox(status, deployment)
    if as_json:
        echo_json(listing)
    else:
        click.echo(outbox_table(listing.get("outbox") or []))


@click.command()
@click.argument("run_id", metavar="ID")
@hub_command
def run(run_id: str, *, client: HubClient, as_json: bool) -> None:
    """Show one run: status, result, state."""
    found = client.run(run_id)
    if as_json:
        echo_json(found)
    else:
        click.echo(run_view(found))


@click.command()
@click.argument("name")
@hub_command
def delete(name: str, *, client: HubClient, as_json: bool) -> None:
    """Delete a deployment (by name or id).

    Its run takes no more mail; `up` stops its sidecar."""
    dep = client.delete_deployment(name)
    if as_json:
        echo_json(dep)
    else:
        click.echo(deployment_view(dep))


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("name")
@click.option("--payload", help="A JSON value (default null), e.g. '{\"qty\": 3}'.")
@click.option(
    "--message-id",
    help="Makes the signal idempotent: a retry gets the first receipt; the same id with"
    " another name or payload is refused (message_id_reused).",
)
@hub_command
def signal(
    run_id: str,
    name: str,
    payload: str | None,
    message_id: str | None,
    *,
    client: HubClient,
    as_json: bool,
) -> None:
    """Send the signal NAME to the run RUN; print the receipt.

    The run gets it as a `signal` item, after the items accepted before it."""
    value: object = None
    if payload is not None:
        try:
            value = msgspec.json.decode(payload)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
    receipt = client.signal(run_id, name, value, message_id=message_id)
    click.echo(msgspec.json.encode(receipt).decode() if as_json else receipt_view(receipt))


@click.command()
@click.argument("approval_id", metavar="ID")
@click.option("--reject", is_flag=True, help="Reject (without it: approve).")
@click.option(
    "--decision",
    type=click.Choice(["approve", "reject"]),
    hidden=True,
    help="The decision spelled out (--reject is the short way).",
)
@hub_command
def approve(
    approval_id: str, reject: bool, decision: str | None, *, client: HubClient, as_json: bool
) -> None:
    """Approve a pending approval (with --reject: reject it).

    The run gets the decision as an `approval` item. The same decision again
    is answered with the first receipt; the other one is refused
    (approval_decided)."""
    if reject and decision == "approve":
        raise click.UsageError("--reject contradicts --decision approve")
    decision = "reject" if reject else decision or "approve"
    answer = client.approve(approval_id, decision)
    if as_json:
        echo_json(answer)
    else:
        click.echo(receipt_view(answer) or f"{approval_id}: {decision}")


@click.command()
@click.option("--run", "run_id", metavar="RUN", help="Only this run's approvals.")
@click.option("--deployment", help="Only this deployment's approvals (id or name).")
@click.option(
    "--status", type=click.Choice(["pending", "decided"]), help="Only approvals in this status."
)
@hub_command
def approvals(
    run_id: str | None,
    deployment: str | None,
    status: str | None,
    *,
    client: HubClient,
    as_json: bool,
) -> None:
    """List approvals (the latest 100, oldest first)."""
    listing = client.approvals(run=run_id, deployment=deployment, status=status)
    if as_json:
        echo_json(listing)
    else:
        click.echo(approvals_table(listing.get("approvals") or []))


@click.command()
@click.argument("deployment")
@click.option("--to", "version", type=int, required=True, help="The version to make active.")
@hub_command
def rollback(deployment: str, version: int, *, client: HubClient, as_json: bool) -> None:
    """Make an earlier version of DEPLOYMENT (id or name) active again.

    Like an update: items accepted from now on are processed by it, those
    accepted before by the version they were stamped with."""
    answer = client.activate_version(deployment, version)
    if as_json:
        echo_json(answer)
    else:
        click.echo(version_line(answer))


@click.command()
@click.argument("deployment")
@hub_command
def versions(deployment: str, *, client: HubClient, as_json: bool) -> None:
    """List the versions of DEPLOYMENT (id or name)."""
    listing = client.versions(deployment)
    if as_json:
        echo_json(listing)
    else:
        click.echo(versions_table(listing.get("versions") or []))


COMMANDS = (
    deploy,
    send,
    deployments,
    runs,
    run,
    delete,
    signal,
    approve,
    approvals,
    outbox,
    rollback,
    versions,
)
