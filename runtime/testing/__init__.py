"""Test tooling for code built on runtime, like ``trio.testing``: an in-memory
bus behind the Transport seam, the failpoints of one process, and the name of
the variable that compresses a process's retry delays.

Production code never imports this package.
"""

from .._config import BACKOFF_SCALE_ENV as BACKOFF_SCALE_ENV
from ._failpoints import CRASH_EXIT_CODE as CRASH_EXIT_CODE
from ._failpoints import FAILPOINTS_ENV as FAILPOINTS_ENV
from ._failpoints import configure_failpoints as configure_failpoints
from ._failpoints import failpoint_spent as failpoint_spent
from ._memory import MemoryBus as MemoryBus
from ._memory import MemoryTransport as MemoryTransport

__all__ = [
    "BACKOFF_SCALE_ENV",
    "CRASH_EXIT_CODE",
    "FAILPOINTS_ENV",
    "MemoryBus",
    "MemoryTransport",
    "configure_failpoints",
    "failpoint_spent",
]
