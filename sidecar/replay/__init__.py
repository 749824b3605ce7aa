"""Replay: a run's recorded items through new workflow code, in a scratch
process of its own (``python -m sidecar.replay``, started by the hub)."""

from ._run import ReplayFailure as ReplayFailure
from ._run import replay as replay
from ._run import run_job as run_job

__all__ = ["ReplayFailure", "replay", "run_job"]
