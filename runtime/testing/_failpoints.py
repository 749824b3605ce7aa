"""Failpoints from inside a test: the production side is runtime/failpoints.py.

A test of one process replaces the active failpoints with
:func:`configure_failpoints`; a test that starts processes passes the spec in
their environment under :data:`FAILPOINTS_ENV` and expects a ``crash`` to
end them with :data:`CRASH_EXIT_CODE`.
"""

from __future__ import annotations

from .. import failpoints
from ..failpoints import CRASH_EXIT_CODE as CRASH_EXIT_CODE
from ..failpoints import ENV

FAILPOINTS_ENV = ENV


def configure_failpoints(spec: str) -> None:
    """Replace this process's active failpoints with ``spec`` (``""``: none).

    A malformed spec, or one naming a failpoint not in the registry, raises
    ``FailpointSpecError`` (a ValueError) and leaves the active ones as they were.
    """
    failpoints._points = failpoints.parse(spec)


def failpoint_spent(name: str) -> bool:
    """Whether ``name``, configured to fire N times (``N*action``), has fired
    all N: a test waits on this to know a party has reached a ``1*pause``."""
    point = failpoints._points.get(name)
    return point is not None and point.remaining == 0
