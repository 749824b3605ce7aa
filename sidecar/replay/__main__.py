"""``python -m sidecar.replay``: the scratch process of ``mailrun replay``.

It reads one replay job (JSON) on stdin and answers with one JSON document
on stdout: the report (exit 0), or why the replay could not be made
(exit 1). The hub starts it; see :mod:`sidecar.replay._run` and docs/replay.md.
This is where the process starts, so its environment (a sidecar's resource
limits) and its log are read and set up here, once.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

from runtime.process import LOG_FORMAT
from runtime.sidecar_contract import Limits

from ._run import run_job

log = logging.getLogger("mailrun.replay")


def main() -> int:
    """A job on stdin, the answer on stdout, the exit code of the answer."""
    raw = sys.stdin.buffer.read()
    # Only the answer goes to stdout: the workflow's prints (fd 1 included)
    # go to stderr, and it reads no stdin.
    answer = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    with open(os.devnull, "rb") as devnull:
        os.dup2(devnull.fileno(), 0)
    # Warnings only: the hub shows the tail of stderr when a replay fails,
    # and the workflow's own prints go there too.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=LOG_FORMAT)
    try:
        Limits.from_env(os.environ).apply()  # a sidecar's limits
    except (ValueError, OSError) as exc:
        log.warning("resource limits not applied: %s", exc)
    with tempfile.TemporaryDirectory(prefix="replay-") as scratch:
        code, out = run_job(raw, Path(scratch) / "src")
    with answer:
        answer.write(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
