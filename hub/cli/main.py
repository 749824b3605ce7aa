"""The ``mailrun`` command line (console script entry: ``main``): the command
group, and every command gathered into it.

The commands live by what they work on: the processes they run
(``processes``: ``hub``, ``up``, ``demo``, ``sidecar``, and ``dkim-record``
for the hub's DKIM key), a state dir with no hub running (``statedir``:
``migrate``, ``nats-config``), and a running hub
over its HTTP API (``operating``: deploy, send, list, ``producer``,
``replay``, ``watch``; ``steering``: resume, retry, cancel, pause,
schedules).
"""

from __future__ import annotations

import click

from runtime import check_failpoints, private_umask
from runtime.errors import FailpointSpecError

from .base import fail
from .operating import COMMANDS, producer, replay, watch
from .processes import demo_cmd, dkim_record, hub_cmd, sidecar_cmd, up_cmd
from .statedir import migrate, nats_config_cmd
from .steering import COMMANDS as STEERING_COMMANDS


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


for _command in (
    up_cmd,
    demo_cmd,
    hub_cmd,
    sidecar_cmd,
    migrate,
    nats_config_cmd,
    dkim_record,
    *COMMANDS,
    *STEERING_COMMANDS,
    replay,
    watch,
    producer,
):
    main.add_command(_command)


if __name__ == "__main__":  # pragma: no cover - `python -m hub.cli.main`
    main()
