"""The sidecars of ``mailrun up``: the fleet that keeps one per awake
deployment within ``--max-awake`` slots, the start bound each start has
to be welcomed in, the wake loop that starts the asleep ones the hub
names, and the fork server they are forked from."""

from .bound import BOUND_GROWTH as BOUND_GROWTH
from .bound import LOOK_AFTER as LOOK_AFTER
from .bound import LOOK_EVERY as LOOK_EVERY
from .bound import Look as Look
from .bound import StartBound as StartBound
from .fleet import NUDGE_EVERY as NUDGE_EVERY
from .fleet import Fleet as Fleet
from .fleet import MakeChild as MakeChild
from .forking import ANSWER_TIMEOUT as ANSWER_TIMEOUT
from .forking import MISSED_ANSWERS as MISSED_ANSWERS
from .forking import ForkServer as ForkServer
from .forking import ForkUnavailable as ForkUnavailable
from .wakes import Strangers as Strangers
from .wakes import wake as wake
from .wakes import wake_loop as wake_loop

__all__ = [
    "ANSWER_TIMEOUT",
    "BOUND_GROWTH",
    "LOOK_AFTER",
    "LOOK_EVERY",
    "MISSED_ANSWERS",
    "NUDGE_EVERY",
    "Fleet",
    "ForkServer",
    "ForkUnavailable",
    "Look",
    "MakeChild",
    "StartBound",
    "Strangers",
    "wake",
    "wake_loop",
]
