"""``mailrun migrate`` and ``mailrun nats-config``: commands on a hub's state
dir, with no hub running (the work is ``upgrade``'s and ``natsconfig``'s)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import click
import msgspec

from runtime.config import DEFAULT_SUBJECT_PREFIX, redact_url

from ..._errors import HubError
from ..base import fail
from ..options import check_database, database_option, state_dir_option


@click.command("migrate")
@state_dir_option("The state dir of `mailrun up` (or of `mailrun hub`).")
@click.option(
    "--sidecar-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the sidecars' state dirs are (default STATE_DIR/sidecars).",
)
@click.option("--check", is_flag=True, help="Only report what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--to",
    "to_url",
    metavar="URL",
    envvar="MAILRUN_MIGRATE_TO",
    callback=check_database,
    help="Then copy the hub's data into this empty PostgreSQL database (env"
    " MAILRUN_MIGRATE_TO keeps a password out of argv); stop the hub first.",
)
@database_option
def migrate(
    state_dir: Path,
    sidecar_root: Path | None,
    check: bool,
    as_json: bool,
    to_url: str | None,
    database: str | None,
) -> None:
    """Upgrade a state dir written by an earlier release.

    Applies the hub database's pending migrations (`up` and `hub` also do at
    boot). Sidecar inboxes and restore records are listed: each sidecar
    migrates its own when it starts. With --check nothing is changed. With
    --to, the hub's database is then copied into PostgreSQL, whole or not at
    all; start the hub with --database URL afterwards. With --database (or
    MAILRUN_DATABASE), the hub's PostgreSQL database is migrated instead."""
    from ...store import LATEST
    from ..progress import Steps
    from .upgrade import (
        database_state,
        inspect_state,
        migrate_database,
        migrate_state,
        move_state,
        render,
        render_database,
    )

    if database is not None and to_url is None:
        shown = redact_url(database)
        steps = Steps("mailrun migrate: applied", file=sys.stderr)
        try:
            if check:
                version, pending = anyio.run(database_state, database)
                applied: list[str] = []
            else:
                pending = []
                applied = anyio.run(migrate_database, database, None if as_json else steps)
                version = LATEST
        except HubError as exc:
            fail(f"{exc.reason}: {exc.detail}")
        finally:
            steps.close()
        if as_json:
            answer = {"database": shown, "pending": pending, "applied": applied}
            click.echo(msgspec.json.encode(answer).decode())
        else:
            click.echo(render_database(shown, version, pending, applied, check=check))
        return

    if to_url is not None:
        if check:
            fail("--to copies; --check changes nothing: one or the other")

        def copied(table: str, rows: int) -> None:
            click.echo(f"mailrun migrate: copied {rows} row(s) of {table}", err=True)

        try:
            counts = anyio.run(move_state, state_dir, to_url, None, copied)
        except HubError as exc:
            fail(f"{exc.reason}: {exc.detail}")
        if as_json:
            click.echo(msgspec.json.encode({"copied": counts}).decode())
        else:
            click.echo(f"copied {sum(counts.values())} rows into {redact_url(to_url)}")
        return

    # Each migration applied: a bar on a terminal, a line otherwise (on
    # stderr: stdout is the report).
    steps = Steps("mailrun migrate: applied", file=sys.stderr)
    try:
        if check:
            report = anyio.run(inspect_state, state_dir, sidecar_root)
        else:
            report = anyio.run(migrate_state, state_dir, sidecar_root, None if as_json else steps)
    except HubError as exc:
        fail(f"{exc.reason}: {exc.detail}")
    finally:
        steps.close()
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        click.echo(render(report, check=check))


@click.command("nats-config")
@state_dir_option("The hub's state dir.")
@click.option(
    "--subject-prefix",
    default=DEFAULT_SUBJECT_PREFIX,
    show_default=True,
    help="The hub's NATS subject prefix.",
)
def nats_config_cmd(state_dir: Path, subject_prefix: str) -> None:
    """Print the authorization config for an external NATS server.

    One nkey user for the hub (every subject), one per live deployment (its
    own subjects only) and one per producer (its own ingress subject only),
    from the hub's state; only public keys. Install it in the server's
    config and reload the server (nats-server --signal reload) after every
    deploy, delete, producer add and producer remove. `mailrun up` does this
    by itself for its embedded server."""
    from .natsconfig import nats_config

    try:
        config = nats_config(state_dir, subject_prefix)
    except HubError as exc:
        fail(f"{exc.reason}: {exc.detail}")
    click.echo(config.text, nl=False)
    for dep in config.without_identity:
        click.echo(
            f"warning: deployment {dep} has no NATS identity (created before them);"
            " its sidecar cannot connect to a server with this config (docs/security.md)",
            err=True,
        )
