"""The hub's clock: the loops that turn time into items, each fired through
the one accept path (the deployments' schedules)."""

from .schedules import Scheduler as Scheduler

__all__ = ["Scheduler"]
