"""Time in the store: the runs' pending timers (``ctx.set_timer``, and the
expiry of an approval asked with a timeout) and the deployments' schedules,
each fired as an item through the one accept path."""

from .schema import APPROVAL_EXPIRY as APPROVAL_EXPIRY
from .schema import SCHEDULES_PG as SCHEDULES_PG
from .schema import TIMER_KIND as TIMER_KIND
from .schema import TIMERS_PG as TIMERS_PG
from .schema import add_schedules as add_schedules
from .schema import add_timers as add_timers

__all__ = [
    "APPROVAL_EXPIRY",
    "SCHEDULES_PG",
    "TIMERS_PG",
    "TIMER_KIND",
    "add_schedules",
    "add_timers",
]
