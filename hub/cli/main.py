"""The ``mailrun`` command line (console script entry: ``main``).

This module holds the commands that run the parts; those that operate a
running hub over HTTP are in ``commands``. ``up`` and ``demo`` supervise the
parts as OS processes; ``sidecar`` execs ``python -m sidecar``, so the hub
package never imports sidecar code.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import click
import msgspec

from runtime import (
    DEFAULT_HTTP,
    DEFAULT_MAIL_DOMAIN,
    DEFAULT_MAX_BODY,
    DEFAULT_NATS_URL,
    DEFAULT_REDELIVER_AFTER,
    DEFAULT_RUN_HISTORY,
    DEFAULT_SUBJECT_PREFIX,
    NATS_URL_ENV,
    REDELIVER_AFTER_ENV,
    RUN_HISTORY_ENV,
    FailpointSpecError,
    cancel_on_signals,
    check_failpoints,
    parse_host_port,
    private_umask,
    redact_url,
    start_process,
    unwrapping_groups,
)

from .._errors import HubError
from .._token import ADMIN_TOKEN_FILE, DEFAULT_STATE_DIR, read_token_file
from ..outbound import PASSWORD_ENV, STARTTLS_ENV, USER_ENV
from ..smtp import PASSWORD_ENV as SMTP_PASSWORD_ENV
from ..smtp import USER_ENV as SMTP_USER_ENV
from ..smtp import smtp_config
from ..store import DATABASE_ENV, LATEST, is_database_url
from .commands import COMMANDS, F, fail
from .producers import producer
from .replay import replay
from .watch import watch

_hub_log = logging.getLogger("mailrun.hub")


def _host_port(
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
    return None if value is None else _host_port(ctx, param, value)


_smtp_relay = click.option(
    "--smtp-relay",
    metavar="HOST:PORT",
    callback=_optional_host_port,
    help="Send mail that runs address outside this hub through this SMTP relay"
    f" (STARTTLS and login: env {STARTTLS_ENV}, {USER_ENV}, {PASSWORD_ENV}).",
)


def _smtp_options(*, allow_port_zero: bool) -> Callable[[F], F]:
    """``--smtp``, ``--smtp-cert``, ``--smtp-key`` (hub.smtp; the login is
    read from the environment, out of argv)."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        return _host_port(ctx, param, value, allow_port_zero=allow_port_zero)

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


def _check_smtp(smtp: str | None, cert: Path | None, key: Path | None) -> None:
    """Refuse, before anything starts, what the hub would refuse (``up`` would
    otherwise restart a hub that cannot start, for ever)."""
    if smtp is None:
        if cert is not None or key is not None:
            fail("--smtp-cert and --smtp-key need --smtp")
        return
    try:
        smtp_config(smtp, os.environ, cert_file=cert, key_file=key, allow_port_zero=True)
    except HubError as exc:
        fail(f"{exc.reason}: {exc.detail}")


def _check_database(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not is_database_url(value):
        raise click.BadParameter("a postgresql:// URL (without it: the state dir's SQLite file)")
    return value


_database = click.option(
    "--database",
    metavar="URL",
    envvar=DATABASE_ENV,
    callback=_check_database,
    help="Keep the hub's data in this PostgreSQL database (postgresql://...) instead of"
    f" STATE_DIR/hub.db (env {DATABASE_ENV}: a URL with a password belongs there, not in"
    " argv).",
)


def _default_state_dir(help_: str) -> Callable[[F], F]:
    """``--state-dir``, defaulting to the one the CLI looks in for the token too."""
    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_STATE_DIR,
        show_default=True,
        help=help_,
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """mailrun: mail-triggered workflows (a hub, one sidecar per deployment, NATS)."""
    # Before anything is written: state is for this user only (runtime._private),
    # and so is whatever the processes started from here write.
    private_umask()
    try:
        check_failpoints(warn=False)  # the processes that run them say they are armed
    except FailpointSpecError as exc:
        fail(str(exc))


# -- running the parts ---------------------------------------------------------


@main.command()
@_default_state_dir("Hub database, sidecar state and logs.")
@click.option("--http", default=DEFAULT_HTTP, show_default=True, callback=_host_port)
@click.option(
    "--nats",
    "nats_url",
    envvar=NATS_URL_ENV,
    help=f"Use this NATS server instead of an embedded one (env {NATS_URL_ENV}).",
)
@click.option("--subject-prefix", help=f"NATS subject prefix (default {DEFAULT_SUBJECT_PREFIX}).")
@_database
@_smtp_relay
@_smtp_options(allow_port_zero=False)
def up(
    state_dir: Path,
    http: str,
    nats_url: str | None,
    subject_prefix: str | None,
    database: str | None,
    smtp_relay: str | None,
    smtp: str | None,
    smtp_cert: Path | None,
    smtp_key: Path | None,
) -> None:
    """Run NATS, the hub and the sidecars, supervised.

    Starts nats-server (unless --nats), the hub and one sidecar per live
    deployment, each its own process; restarts any that dies, with backoff;
    stops them all on SIGTERM/SIGINT. They die with it even on SIGKILL."""
    from ..up import UpSettings, run_up

    check_failpoints()  # its children get them: said here once, and by each child
    _check_smtp(smtp, smtp_cert, smtp_key)

    def say(line: str) -> None:
        click.echo(line, err=True)

    settings = UpSettings(
        state_dir,
        http,
        nats_url,
        subject_prefix=subject_prefix,
        smtp_relay=smtp_relay,
        smtp=smtp,
        smtp_cert=smtp_cert,
        smtp_key=smtp_key,
        database=database,
        say=say,
        environ=dict(os.environ),  # what its children inherit
    )

    async def serve() -> None:
        async with cancel_on_signals(), anyio.create_task_group() as tg:
            info = await tg.start(run_up, settings)
            click.echo(f"mailrun up: hub http://{http} nats {info.nats_url} state {info.state_dir}")
            if smtp is not None:
                click.echo(f"mailrun up: smtp {smtp}")
            token_file = info.state_dir / ADMIN_TOKEN_FILE
            if info.token_created:
                # Once: later starts print where the token is, not the token.
                click.echo(f"mailrun up: console {info.console_url} (token kept in {token_file})")
            else:
                click.echo(f"mailrun up: console {info.http}/?token=<the token in {token_file}>")
            sys.stdout.flush()  # a log file would hold it back until up exits

    try:
        with unwrapping_groups():
            anyio.run(serve)
    except HubError as exc:
        fail(f"{exc.reason}: {exc.detail}")


@main.command()
def demo() -> None:
    """Run the bundled example end to end.

    Starts `up` in a temporary dir on free ports, deploys the counter example,
    mails it, shows the run's progress and result, and stops everything."""
    from .demo import SUBJECTS, DemoFailed, run_demo
    from .progress import Progress

    async def go() -> list[signal.Signals]:
        # A bar on a terminal, the same lines as ever elsewhere.
        with Progress("mailrun demo: processed", len(SUBJECTS), file=sys.stdout) as progress:

            def say(line: str) -> None:
                progress.echo(f"mailrun demo: {line}")

            async with cancel_on_signals() as received:
                await run_demo(say, advance=progress.advance_to, environ=dict(os.environ))
        return received

    try:
        with unwrapping_groups():
            interrupted = anyio.run(go)
    except DemoFailed as exc:
        fail(f"demo failed: {exc.detail}")
    if interrupted:
        fail("demo interrupted; everything it started is stopped", 128 + interrupted[0])


@main.command("hub")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--http",
    default=DEFAULT_HTTP,
    show_default=True,
    callback=functools.partial(_host_port, allow_port_zero=True),
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
@click.option("--domain", help=f"Mail domain of deployments (default {DEFAULT_MAIL_DOMAIN}).")
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
@_database
@_smtp_relay
@_smtp_options(allow_port_zero=True)
def hub_cmd(
    state_dir: Path,
    http: str,
    nats_url: str,
    sidecar_root: Path | None,
    subject_prefix: str | None,
    domain: str | None,
    max_body: int | None,
    token_file: Path | None,
    redeliver_after: float | None,
    run_history: int | None,
    database: str | None,
    smtp_relay: str | None,
    smtp: str | None,
    smtp_cert: Path | None,
    smtp_key: Path | None,
) -> None:
    """Run the hub alone, in this process.

    Runs until SIGTERM/SIGINT; `mailrun up` runs it as a supervised child."""
    from .._server import run_hub
    from .._settings import HubSettings, wire_settings
    from ..outbound import relay_config

    if smtp is None and (smtp_cert is not None or smtp_key is not None):
        fail("--smtp-cert and --smtp-key need --smtp")
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
                smtp, environ, cert_file=smtp_cert, key_file=smtp_key, allow_port_zero=True
            )
        settings = HubSettings(
            state_dir=state_dir,
            http_host=host,
            http_port=port,
            nats_url=nats_url,
            sidecar_root=sidecar_root,
            subject_prefix=subject_prefix or DEFAULT_SUBJECT_PREFIX,
            domain=domain or DEFAULT_MAIL_DOMAIN,
            max_body=max_body or DEFAULT_MAX_BODY,
            wire=wire_settings(redeliver_after=redeliver_after, run_history=run_history),
            admin_token=read_token_file(token_file) if token_file is not None else None,
            relay=relay_config(smtp_relay, environ) if smtp_relay else None,
            smtp=ingress,
            database=database,
            process=process,
        )
    except (HubError, ValueError) as exc:
        _hub_log.error("hub failed: %s", exc)
        raise SystemExit(1) from exc
    run_hub(settings)


@main.command()
@_default_state_dir("The state dir of `mailrun up` (or of `mailrun hub`).")
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
    callback=_check_database,
    help="Then copy the hub's data into this empty PostgreSQL database (env"
    " MAILRUN_MIGRATE_TO keeps a password out of argv); stop the hub first.",
)
@_database
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
    from .progress import Steps
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


@main.command("nats-config")
@_default_state_dir("The hub's state dir.")
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


@main.command()
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--deployment", help="The deployment id (when the state dir holds several).")
@click.option(
    "--nats",
    "nats_url",
    help=f"Overrides the URL in the restore record (env {NATS_URL_ENV}, read by the sidecar).",
)
@click.option("--takeover", is_flag=True, help="Move ownership here and fence the old owner.")
@click.option("--join", "join_token", help="First start on a new host: the token deploy printed.")
def sidecar(
    state_dir: Path,
    deployment: str | None,
    nats_url: str | None,
    takeover: bool,
    join_token: str | None,
) -> None:
    """Run one deployment's sidecar.

    Execs `python -m sidecar`. The first start on a new host takes --join
    with the token `mailrun deploy --join-token` printed; later starts
    restore from disk."""
    argv = [sys.executable, "-m", "sidecar", "--state-dir", str(state_dir)]
    if deployment:
        argv += ["--deployment", deployment]
    env = dict(os.environ)
    if nats_url:
        # It may carry a password: into the environment, out of argv.
        env[NATS_URL_ENV] = nats_url
    if takeover:
        argv.append("--takeover")
    if join_token:
        argv += ["--join", join_token]
    sys.stdout.flush()
    os.execve(sys.executable, argv, env)


for _command in COMMANDS:
    main.add_command(_command)
main.add_command(replay)
main.add_command(watch)
main.add_command(producer)


if __name__ == "__main__":  # pragma: no cover - `python -m hub.cli.main`
    main()
