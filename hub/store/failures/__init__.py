"""What the hub does about handlers that keep failing, and runs stopped from
outside: suspended runs resumed (by the operator, or by a new version),
parked dispatches listed, counted and retried, runs cancelled. A
deployment's policy itself is the deployments room's
(``deployments/policy.py``)."""

from .cancelling import cancel_message_ids as cancel_message_ids
from .cancelling import cancel_run as cancel_run
from .parking import count_failures as count_failures
from .parking import list_parked as list_parked
from .parking import retry_dispatch as retry_dispatch
from .resuming import resume_if_outdated as resume_if_outdated
from .resuming import resume_run as resume_run
from .resuming import resume_suspended as resume_suspended

__all__ = [
    "cancel_run",
    "count_failures",
    "list_parked",
    "resume_if_outdated",
    "resume_run",
    "retry_dispatch",
]
