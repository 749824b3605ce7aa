"""The routes of runs and their dispatches once triggered: reading what they
did, steering a failing or unwanted one (resume, cancel, parked, retry),
deciding their approvals, and replaying one through new code."""

from .approvals import approval_routes as approval_routes
from .failures import failure_routes as failure_routes
from .reading import run_routes as run_routes
from .replay import replay_routes as replay_routes

__all__ = ["approval_routes", "failure_routes", "replay_routes", "run_routes"]
