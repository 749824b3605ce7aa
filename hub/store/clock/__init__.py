"""Time in the store: the runs' pending timers (``ctx.set_timer``, and the
expiry of an approval asked with a timeout) and the deployments' schedules,
each fired as an item through the one accept path."""

from .schedules import Fire as Fire
from .schedules import ScheduleView as ScheduleView
from .schedules import add_schedule as add_schedule
from .schedules import drop_schedules as drop_schedules
from .schedules import due_schedules as due_schedules
from .schedules import earliest_schedule_due as earliest_schedule_due
from .schedules import fire_message_id as fire_message_id
from .schedules import fire_schedule as fire_schedule
from .schedules import list_schedules as list_schedules
from .schedules import remove_schedule as remove_schedule
from .schema import APPROVAL_EXPIRY as APPROVAL_EXPIRY
from .schema import SCHEDULES_PG as SCHEDULES_PG
from .schema import TIMER_KIND as TIMER_KIND
from .schema import TIMERS_PG as TIMERS_PG
from .schema import add_schedules as add_schedules
from .schema import add_timers as add_timers
from .timers import DueTimer as DueTimer
from .timers import cancel_timer as cancel_timer
from .timers import claim_timers as claim_timers
from .timers import count_timers as count_timers
from .timers import drop_deployment_timers as drop_deployment_timers
from .timers import drop_run_timers as drop_run_timers
from .timers import due_timers as due_timers
from .timers import earliest_timer_due as earliest_timer_due
from .timers import run_timers as run_timers
from .timers import set_timer as set_timer

__all__ = [
    "DueTimer",
    "Fire",
    "ScheduleView",
    "add_schedule",
    "cancel_timer",
    "claim_timers",
    "count_timers",
    "due_schedules",
    "due_timers",
    "earliest_schedule_due",
    "earliest_timer_due",
    "fire_message_id",
    "fire_schedule",
    "list_schedules",
    "remove_schedule",
    "set_timer",
]
