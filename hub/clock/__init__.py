"""The hub's clock: the loops that turn time into items, each fired through
the one accept path: the runs' due timers (and the expiry of approvals asked
with a timeout), and the deployments' schedules."""

from .rounds import Round as Round
from .rounds import run_rounds as run_rounds
from .schedules import Scheduler as Scheduler
from .timers import IDLE_LOOK as IDLE_LOOK
from .timers import LATE_AFTER as LATE_AFTER
from .timers import Fired as Fired
from .timers import TimerLoop as TimerLoop
from .timers import fire_page as fire_page
from .timers import timer_trigger as timer_trigger

__all__ = [
    "IDLE_LOOK",
    "LATE_AFTER",
    "Fired",
    "Round",
    "Scheduler",
    "TimerLoop",
    "fire_page",
    "run_rounds",
    "timer_trigger",
]
