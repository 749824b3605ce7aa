"""``mailrun sidecar``: one deployment's sidecar, run by hand, as ``python -m
sidecar``.

The command execs it, so the hub package never imports sidecar code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from runtime import NATS_URL_ENV, python_m


@click.command("sidecar")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--deployment", help="The deployment id (when the state dir holds several).")
@click.option(
    "--nats",
    "nats_url",
    help=f"Overrides the URL in the restore record (env {NATS_URL_ENV}, read by the sidecar).",
)
@click.option("--takeover", is_flag=True, help="Move ownership here and fence the old owner.")
@click.option("--join", "join_token", help="First start on a new host: the token deploy printed.")
def sidecar_cmd(
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
    argv = [*python_m("sidecar"), "--state-dir", str(state_dir)]
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
