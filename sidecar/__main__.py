"""``python -m sidecar --state-dir D [--deployment DEP] [--nats URL] [--takeover]
[--join TOKEN] [--idle-stop SECONDS]``: one deployment's sidecar process.

Before it loads the workflow the process makes itself what
``runtime._contain`` describes: it re-executes itself (once) when its argv
holds a secret (the join token, a NATS URL, which may carry a password: both
move out of argv, which any local user can read) or lacks the deployment id,
or when its environment holds more than a sidecar gets; then it works in its
state directory, under its resource limits, with umask 077.

Its command line and environment are read once, in :func:`main`, into a
:class:`SidecarSettings`; nothing it runs reads either again.

With ``--idle-stop`` it asks the hub to sleep once idle that long, and
exits ``SidecarExit.ASLEEP`` when the hub grants it; SIGUSR1 then means
"sleep now if idle". SIGUSR1 is ignored from the first line of :func:`main`
(and through the re-execution) until the receiver takes it, and again once
the receiver is gone: a supervisor that signals a sidecar starting or
stopping never kills it.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from runtime import (
    FINAL_EXIT_NOTE,
    NATS_URL_ENV,
    ProcessSettings,
    RecordDecodeError,
    SidecarExit,
    cancel_on_signals,
    check_failpoints,
    make_private,
    private_umask,
    python_m,
    sidecar_env,
    start_process,
    tracing,
    unwrap_group,
)
from runtime.sidecar_contract import Limits, sidecar_argv

from ._app import Sidecar, SidecarOptions
from ._errors import (
    DeploymentGone,
    HomeLocked,
    InboxSchemaTooNew,
    JoinTokenError,
    OwnerConflict,
    RestoreRecordMissing,
)
from ._record import join, locate

log = logging.getLogger("mailrun.sidecar")


@dataclass(frozen=True)
class SidecarSettings:
    """What a sidecar process runs with, read once where it starts."""

    state_dir: Path  # absolute
    deployment: str | None
    nats_url: str | None = field(repr=False)  # may carry a password
    takeover: bool
    join: str | None = field(repr=False)
    idle_stop: float
    """Seconds with nothing to do before it asks the hub to sleep (0: never)."""
    process: ProcessSettings
    """Its log level, event loop, retry cap and SQLite's synchronous level."""
    environ: Mapping[str, str] = field(repr=False)
    """The environment it started with: what it contains itself to."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sidecar",
        description="Run one deployment's sidecar from its restore record.",
    )
    p.add_argument("--state-dir", type=Path, required=True, help="the sidecar's state directory")
    p.add_argument("--deployment", help="deployment id (optional when only one record exists)")
    p.add_argument(
        "--nats",
        help=f"NATS URL (overrides the one in the restore record; env {NATS_URL_ENV})",
    )
    p.add_argument(
        "--takeover", action="store_true", help="move ownership here, fencing the current owner"
    )
    p.add_argument("--join", metavar="TOKEN", help="write the restore record from a join token")
    p.add_argument(
        "--idle-stop",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="ask the hub to sleep after this long with nothing to do, and exit"
        f" {int(SidecarExit.ASLEEP)} when it grants it (default 0: never)",
    )
    return p


def _seconds(text: str) -> float:
    value = float(text)
    if not (0 <= value < math.inf):
        raise argparse.ArgumentTypeError(f"not a number of seconds >= 0: {text}")
    return value


# Built once, at import: a forked sidecar finds it made in the fork server.
_PARSER = _parser()


def main(argv: list[str] | None = None, *, forked: bool = False) -> int:
    """``argv`` None: this is the process (``python -m sidecar``), which contains
    itself; a list: a test calling in, whose process is left as it is.

    ``forked``: this process was forked by the fork server (sidecar/forking/)
    with its argv and environment already contained: it applies its limits,
    umask and cwd, and never executes itself again (that would be a full
    interpreter start, and would run another release's code after an upgrade)."""
    # Before anything else: a SIGUSR1 that comes before its receiver does
    # nothing, instead of killing the process (ignored stays ignored over exec).
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if argv is None:
        private_umask()
        # The imports made some 46,000 objects that live as long as the
        # process: out of the collector's sight, its passes (and the full
        # collections at exit) no longer walk them, a fifth of a wake's CPU
        # (docs/performance.md, "A sidecar's start").
        gc.freeze()
    environ = dict(os.environ)
    args = _PARSER.parse_args(argv)
    try:
        # Failpoints are said below, once this is the process that runs.
        process = start_process(environ, say_failpoints=False)
    except ValueError as exc:  # a FailpointSpecError is one
        log.error("%s", exc)
        return SidecarExit.USAGE
    settings = SidecarSettings(
        state_dir=args.state_dir.absolute(),
        deployment=args.deployment,
        nats_url=args.nats if args.nats is not None else environ.get(NATS_URL_ENV),
        takeover=args.takeover,
        join=args.join,
        idle_stop=args.idle_stop,
        process=process,
        environ=environ,
    )
    deployment_id = settings.deployment
    try:
        if settings.join:
            deployment_id = join(settings.state_dir, settings.join, deployment_id).deployment_id
        deployment_id = locate(settings.state_dir, deployment_id).parent.name
    except (RestoreRecordMissing, JoinTokenError) as exc:
        log.error("%s", exc)
        return SidecarExit.USAGE
    if argv is None:
        try:
            _contain(settings, deployment_id, forked=forked)
        except (ValueError, OSError) as exc:
            log.error("cannot contain the sidecar: %s", exc)
            return SidecarExit.USAGE
    check_failpoints()
    options = SidecarOptions(
        state_dir=settings.state_dir,
        deployment_id=deployment_id,
        nats_url=settings.nats_url,
        takeover=settings.takeover,
        backoff_max=process.backoff_max,
        synchronous=process.sqlite_synchronous,
        idle_stop=settings.idle_stop,
    )
    tracing.setup("mailrun-sidecar", environ)
    try:
        asleep = anyio.run(_serve, options, backend_options=dict(process.backend_options))
    except Exception as exc:
        cause = unwrap_group(exc)
        if isinstance(cause, OwnerConflict):
            log.error(
                "%s: another sidecar process owns deployment %s; stop it, or start this"
                " one with --takeover to move the deployment here",
                cause,
                deployment_id,
            )
            return _final(settings.state_dir, SidecarExit.OWNER_CONFLICT)
        if isinstance(cause, HomeLocked):
            log.error("%s", cause)
            return _final(settings.state_dir, SidecarExit.OWNER_CONFLICT)
        if isinstance(cause, DeploymentGone):
            log.error("deployment %s was deleted: %s", deployment_id, cause)
            return _final(settings.state_dir, SidecarExit.DELETED)
        if isinstance(cause, RecordDecodeError | InboxSchemaTooNew | RestoreRecordMissing):
            log.error("cannot boot: %s", cause)
            return SidecarExit.USAGE
        raise
    finally:
        tracing.shutdown()  # what is buffered goes out before the process does
    if asleep:
        log.info("deployment %s is asleep: exiting", deployment_id)
        return _final(settings.state_dir, SidecarExit.ASLEEP)
    return 0


def _final(state_dir: Path, code: SidecarExit) -> SidecarExit:
    """Exit with ``code`` on purpose: the note that makes a supervisor believe
    it (the workflow's code could exit with the same number)."""
    try:
        (state_dir / FINAL_EXIT_NOTE).write_text(str(os.getpid()))
    except OSError as exc:
        # Without the note the supervisor restarts this process, which meets
        # the same conflict again: a loop, slowed by its backoff, not a loss.
        log.warning("cannot write %s: %s", FINAL_EXIT_NOTE, exc)
    return code


def _contain(settings: SidecarSettings, deployment_id: str, *, forked: bool) -> None:
    env = sidecar_env(settings.environ, home=settings.state_dir)
    if settings.nats_url:
        env[NATS_URL_ENV] = settings.nats_url
    argv = _argv(settings, deployment_id)
    if sys.argv[1:] != argv or dict(settings.environ) != env:
        if forked:
            raise ValueError("forked with an argv or environment it would have to change")
        # Operators and supervisors find a sidecar by the deployment id in its
        # argv: name it there.
        os.execve(sys.executable, [*python_m("sidecar"), *argv], env)
    _confine(settings)


def _confine(settings: SidecarSettings) -> None:
    """What a contained process does to itself, executed or forked: its
    state directory as cwd, private, and its limits lowered."""
    limits = Limits.from_env(settings.environ)
    os.chdir(settings.state_dir)
    make_private(settings.state_dir)
    limits.apply()


def _argv(settings: SidecarSettings, deployment_id: str) -> list[str]:
    """The argv this process runs with: no secrets (the join token is on disk
    now, the NATS URL in the environment)."""
    return sidecar_argv(
        settings.state_dir,
        deployment_id,
        takeover=settings.takeover,
        idle_stop=settings.idle_stop,
    )


async def _serve(options: SidecarOptions) -> bool:
    """Serve until stopped; True when it stopped because the hub granted its Sleep."""
    sidecar = Sidecar(options)
    # The first SIGTERM/SIGINT stops in order; a second one stops at once.
    async with cancel_on_signals(graceful=sidecar.stop), anyio.create_task_group() as tg:
        if options.idle_stop > 0:
            await tg.start(_nudges, sidecar)
        await sidecar.run()
        tg.cancel_scope.cancel()
    return sidecar.asleep


async def _nudges(
    sidecar: Sidecar, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """SIGUSR1: sleep now if idle (``mailrun up`` asks while starts wait for a slot)."""
    try:
        with anyio.open_signal_receiver(signal.SIGUSR1) as signals:
            task_status.started()
            async for _ in signals:
                log.info("SIGUSR1: sleeping now if idle")
                sidecar.nudge()
    finally:
        # The receiver put the default action (terminate) back: ignored again.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
