"""The ``mailrun up`` and ``mailrun demo`` commands: nats-server, the hub and a
sidecar per live deployment, supervised from this process (the demo's in a
temporary dir: ``demo``)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Literal

import anyio
import click

from runtime import NATS_URL_ENV, cancel_on_signals, check_failpoints
from runtime.config import DEFAULT_HTTP, DEFAULT_SUBJECT_PREFIX
from runtime.loops import unwrapping_groups

from ..._errors import HubError
from ..._token import ADMIN_TOKEN_FILE
from ...up import (
    DEFAULT_IDLE_STOP,
    DEFAULT_MAX_AWAKE,
    DEFAULT_SIDECAR_JOIN_TIMEOUT,
    DEFAULT_SIDECAR_START,
    SIDECAR_JOIN_TIMEOUT_ENV,
    SIDECAR_START_ENV,
)
from ..base import fail
from ..options import (
    check_dkim,
    check_smtp,
    database_option,
    dkim_options,
    domain_option,
    host_port,
    ports_option,
    sender_check_options,
    smtp_options,
    smtp_relay_option,
    state_dir_option,
)


@click.command("up")
@state_dir_option("Hub database, sidecar state and logs.")
@click.option("--http", default=DEFAULT_HTTP, show_default=True, callback=host_port)
@click.option(
    "--nats",
    "nats_url",
    envvar=NATS_URL_ENV,
    help=f"Use this NATS server instead of an embedded one (env {NATS_URL_ENV}).",
)
@click.option("--subject-prefix", help=f"NATS subject prefix (default {DEFAULT_SUBJECT_PREFIX}).")
@ports_option
@domain_option
@database_option
@smtp_relay_option
@dkim_options
@smtp_options(allow_port_zero=False)
@sender_check_options
@click.option(
    "--idle-stop",
    type=click.FloatRange(min=0),
    default=DEFAULT_IDLE_STOP,
    show_default=True,
    metavar="SECONDS",
    help="A sidecar idle this long falls asleep (no process) until its deployment "
    "has work again; 0: sidecars always run.",
)
@click.option(
    "--max-awake",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_AWAKE,
    show_default=True,
    metavar="N",
    help="With --idle-stop: at most N sidecar processes at once; further wakes "
    "wait their turn while idle sidecars are asked to fall asleep.",
)
@click.option(
    "--sidecar-start",
    type=click.Choice(["fork", "exec"]),
    envvar=SIDECAR_START_ENV,
    default=None,
    help="fork: sidecars are forked from a process that imported the sidecar once "
    "(the default on Linux); exec: each is a full `python -m sidecar`. "
    "After an upgrade restart `up`: a fork server forks the code it imported.",
)
@click.option(
    "--sidecar-join-timeout",
    type=click.FloatRange(min=0),
    envvar=SIDECAR_JOIN_TIMEOUT_ENV,
    default=DEFAULT_SIDECAR_JOIN_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="A sidecar the hub has not welcomed this long after its start (NATS and "
    f"the hub up) is killed and started again; 0: no bound (env {SIDECAR_JOIN_TIMEOUT_ENV}).",
)
def up_cmd(
    state_dir: Path,
    http: str,
    nats_url: str | None,
    subject_prefix: str | None,
    ports: range | None,
    domains: tuple[str, ...],
    database: str | None,
    smtp_relay: str | None,
    dkim_keys: tuple[str, ...],
    dkim_selectors: tuple[str, ...],
    smtp: str | None,
    smtp_cert: Path | None,
    smtp_key: Path | None,
    dns_server: str | None,
    smtp_trusted_relays: tuple[str, ...],
    idle_stop: float,
    max_awake: int,
    sidecar_start: Literal["fork", "exec"] | None,
    sidecar_join_timeout: float,
) -> None:
    """Run NATS, the hub and the sidecars, supervised.

    Starts nats-server (unless --nats), the hub and one sidecar per live
    deployment, each its own process; restarts any that dies, with backoff;
    stops them all on SIGTERM/SIGINT. They die with it even on SIGKILL.
    A sidecar idle for --idle-stop seconds falls asleep; it is started again
    when its deployment has work (a mail, a timer, a rollout)."""
    from ...up import UpSettings, run_up

    check_failpoints()  # its children get them: said here once, and by each child
    check_smtp(smtp, smtp_cert, smtp_key, dns_server, smtp_trusted_relays)
    # Read as the hub will, so a key that cannot sign stops `up` at once.
    dkim = check_dkim(dkim_keys, dkim_selectors)

    def say(line: str) -> None:
        click.echo(line, err=True)

    settings = UpSettings(
        state_dir,
        http,
        nats_url,
        subject_prefix=subject_prefix,
        ports=ports,
        domains=domains,
        smtp_relay=smtp_relay,
        dkim=tuple(arg for key in dkim for arg in key.options()),
        smtp=smtp,
        smtp_cert=smtp_cert,
        smtp_key=smtp_key,
        dns_server=dns_server,
        smtp_trusted_relays=smtp_trusted_relays,
        database=database,
        idle_stop=idle_stop,
        max_awake=max_awake,
        sidecar_start=sidecar_start or DEFAULT_SIDECAR_START,
        sidecar_join_timeout=sidecar_join_timeout,
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


@click.command("demo")
@ports_option
def demo_cmd(ports: range | None) -> None:
    """Run the bundled example end to end.

    Starts `up` in a temporary dir on free ports, deploys the counter example,
    mails it, shows the run's progress and result, and stops everything."""
    from ..progress import Progress
    from .demo import SUBJECTS, DemoFailed, run_demo

    async def go() -> list[signal.Signals]:
        # A bar on a terminal, the same lines as ever elsewhere.
        with Progress("mailrun demo: processed", len(SUBJECTS), file=sys.stdout) as progress:

            def say(line: str) -> None:
                progress.echo(f"mailrun demo: {line}")

            async with cancel_on_signals() as received:
                await run_demo(
                    say, advance=progress.advance_to, environ=dict(os.environ), ports=ports
                )
        return received

    try:
        with unwrapping_groups():
            interrupted = anyio.run(go)
    except DemoFailed as exc:
        fail(f"demo failed: {exc.detail}")
    except HubError as exc:  # before it started anything: no free port in --ports
        fail(f"{exc.reason}: {exc.detail}")
    if interrupted:
        fail("demo interrupted; everything it started is stopped", 128 + interrupted[0])
