"""What every long-running loop and process uses: the event loop, SIGTERM
and SIGINT as cancellation, wakeups between tasks, the retry delays with
their saturating attempt counter and one retry loop's bookkeeping (Retry),
a context over an exit stack it owns, a task group's error of one as
itself, and workers that run short jobs in tasks kept for the next one."""

from ._backoff import ATTEMPT_LIMIT as ATTEMPT_LIMIT
from ._backoff import Backoff as Backoff
from ._backoff import Retry as Retry
from ._backoff import backoff as backoff
from ._backoff import backoff_max_from_env as backoff_max_from_env
from ._backoff import next_attempt as next_attempt
from ._eventloop import loop_options as loop_options
from ._eventloop import running_loop as running_loop
from ._groups import unwrap_group as unwrap_group
from ._groups import unwrapping_groups as unwrapping_groups
from ._signals import cancel_on_signals as cancel_on_signals
from ._stacked import StackedContext as StackedContext
from ._wakeup import Broadcast as Broadcast
from ._wakeup import Flag as Flag
from ._wakeup import Wakeup as Wakeup
from ._workers import Workers as Workers

__all__ = [
    "ATTEMPT_LIMIT",
    "Backoff",
    "Broadcast",
    "Flag",
    "Retry",
    "StackedContext",
    "Wakeup",
    "Workers",
    "backoff",
    "backoff_max_from_env",
    "cancel_on_signals",
    "loop_options",
    "next_attempt",
    "running_loop",
    "unwrap_group",
    "unwrapping_groups",
]
