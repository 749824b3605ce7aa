"""Test tooling for code built on runtime, like ``trio.testing``: an in-memory
bus behind the Transport seam and the failpoints of one process.

Production code never imports this package.
"""

from ._failpoints import CRASH_EXIT_CODE as CRASH_EXIT_CODE
from ._failpoints import FAILPOINTS_ENV as FAILPOINTS_ENV
from ._failpoints import configure_failpoints as configure_failpoints
from ._failpoints import failpoint_spent as failpoint_spent
from ._memory import MemoryBus as MemoryBus
from ._memory import MemoryTransport as MemoryTransport

__all__ = [
    "CRASH_EXIT_CODE",
    "FAILPOINTS_ENV",
    "MemoryBus",
    "MemoryTransport",
    "configure_failpoints",
    "failpoint_spent",
]
