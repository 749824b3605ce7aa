"""Time in the hub: the loop that fires the runs' due timers (and expires
approvals asked with a timeout) as items through the one accept path."""

from .timers import IDLE_LOOK as IDLE_LOOK
from .timers import LATE_AFTER as LATE_AFTER
from .timers import Fired as Fired
from .timers import TimerLoop as TimerLoop
from .timers import fire_page as fire_page
from .timers import timer_trigger as timer_trigger

__all__ = ["IDLE_LOOK", "LATE_AFTER", "Fired", "TimerLoop", "fire_page", "timer_trigger"]
