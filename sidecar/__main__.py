"""``python -m sidecar --state-dir D [--deployment DEP] [--nats URL] [--takeover]
[--join TOKEN]``: one deployment's sidecar process.

Before it loads the workflow the process makes itself what
``runtime._contain`` describes: it re-executes itself (once) when its argv
holds a secret (the join token, a NATS URL, which may carry a password: both
move out of argv, which any local user can read) or lacks the deployment id,
or when its environment holds more than a sidecar gets; then it works in its
state directory, under its resource limits, with umask 077.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import anyio

from runtime import (
    DEFAULT_LOG_LEVEL,
    LOG_LEVEL_ENV,
    NATS_URL_ENV,
    Limits,
    RecordDecodeError,
    SidecarExit,
    backoff_max_from_env,
    cancel_on_signals,
    check_failpoints,
    loop_options,
    make_private,
    private_umask,
    sidecar_env,
    unwrap_group,
)
from runtime.sqlite import sqlite_synchronous

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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sidecar",
        description="Run one deployment's sidecar from its restore record.",
    )
    p.add_argument("--state-dir", type=Path, required=True, help="the sidecar's state directory")
    p.add_argument("--deployment", help="deployment id (optional when only one record exists)")
    p.add_argument(
        "--nats",
        default=os.environ.get(NATS_URL_ENV),
        help=f"NATS URL (overrides the one in the restore record; env {NATS_URL_ENV})",
    )
    p.add_argument(
        "--takeover", action="store_true", help="move ownership here, fencing the current owner"
    )
    p.add_argument("--join", metavar="TOKEN", help="write the restore record from a join token")
    return p


def main(argv: list[str] | None = None) -> int:
    """``argv`` None: this is the process (``python -m sidecar``), which contains
    itself; a list: a test calling in, whose process is left as it is."""
    if argv is None:
        private_umask()
    args = _parser().parse_args(argv)
    args.state_dir = args.state_dir.absolute()
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get(LOG_LEVEL_ENV, DEFAULT_LOG_LEVEL).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        check_failpoints(warn=False)  # said below, once this is the process that runs
        backoff_max = backoff_max_from_env(os.environ)
        sqlite_synchronous(os.environ, warn=True)
        loop = loop_options(os.environ)
    except ValueError as exc:  # a FailpointSpecError is one
        log.error("%s", exc)
        return SidecarExit.USAGE
    try:
        if args.join:
            args.deployment = join(args.state_dir, args.join, args.deployment).deployment_id
        deployment_id = locate(args.state_dir, args.deployment).parent.name
    except (RestoreRecordMissing, JoinTokenError) as exc:
        log.error("%s", exc)
        return SidecarExit.USAGE
    if argv is None:
        try:
            _contain(args, deployment_id)
        except (ValueError, OSError) as exc:
            log.error("cannot contain the sidecar: %s", exc)
            return SidecarExit.USAGE
    check_failpoints()
    options = SidecarOptions(
        state_dir=args.state_dir,
        deployment_id=deployment_id,
        nats_url=args.nats,
        takeover=args.takeover,
        backoff_max=backoff_max,
    )
    try:
        anyio.run(_serve, options, backend_options=loop)
    except Exception as exc:
        cause = unwrap_group(exc)
        if isinstance(cause, OwnerConflict):
            log.error(
                "%s: another sidecar process owns deployment %s; stop it, or start this"
                " one with --takeover to move the deployment here",
                cause,
                deployment_id,
            )
            return SidecarExit.OWNER_CONFLICT
        if isinstance(cause, HomeLocked):
            log.error("%s", cause)
            return SidecarExit.OWNER_CONFLICT
        if isinstance(cause, DeploymentGone):
            log.error("deployment %s was deleted: %s", deployment_id, cause)
            return SidecarExit.DELETED
        if isinstance(cause, RecordDecodeError | InboxSchemaTooNew | RestoreRecordMissing):
            log.error("cannot boot: %s", cause)
            return SidecarExit.USAGE
        raise
    return 0


def _contain(args: argparse.Namespace, deployment_id: str) -> None:
    env = sidecar_env(os.environ, home=args.state_dir)
    if args.nats:
        env[NATS_URL_ENV] = args.nats
    argv = _argv(args, deployment_id)
    if sys.argv[1:] != argv or dict(os.environ) != env:
        # Operators and supervisors find a sidecar by the deployment id in its
        # argv: name it there. The cwd stays for now: `-m sidecar` may be
        # found through it.
        os.execve(sys.executable, [sys.executable, "-m", "sidecar", *argv], env)
    limits = Limits.from_env(os.environ)
    os.chdir(args.state_dir)
    make_private(args.state_dir)
    limits.apply()


def _argv(args: argparse.Namespace, deployment_id: str) -> list[str]:
    """The argv this process runs with: no secrets (the join token is on disk
    now, the NATS URL in the environment)."""
    out = ["--state-dir", str(args.state_dir), "--deployment", deployment_id]
    if args.takeover:
        out.append("--takeover")
    return out


async def _serve(options: SidecarOptions) -> None:
    sidecar = Sidecar(options)
    # The first SIGTERM/SIGINT stops in order; a second one stops at once.
    async with cancel_on_signals(graceful=sidecar.stop):
        await sidecar.run()


if __name__ == "__main__":
    sys.exit(main())
