"""Execution: running the deployment's workflow code over its runs' items.

The scheduler (one supervised actor per run, in seq order), the run actor
and its handler calls, the handler's ``ctx``, loading the code (by
version), the items a handler receives, and the handler timeout.
"""

from ._config import RunsConfig as RunsConfig
from ._context import Context as Context
from ._context import Minter as Minter
from ._context import check_events as check_events
from ._context import derived_id as derived_id
from ._runs import Runs as Runs
from ._state import state_snapshot as state_snapshot
from ._steps import DEFAULT_STEP_RETRY as DEFAULT_STEP_RETRY
from ._steps import StepRecorder as StepRecorder
from ._steps import StepRetry as StepRetry
from ._steps import Steps as Steps
from ._versions import Versions as Versions
from ._workflow import ApprovalDecision as ApprovalDecision
from ._workflow import Cancel as Cancel
from ._workflow import ChildEnded as ChildEnded
from ._workflow import Handler as Handler
from ._workflow import Item as Item
from ._workflow import Mail as Mail
from ._workflow import ScheduleFire as ScheduleFire
from ._workflow import Signal as Signal
from ._workflow import Start as Start
from ._workflow import StateMigration as StateMigration
from ._workflow import Timer as Timer
from ._workflow import cancel_order as cancel_order
from ._workflow import item_of as item_of
from ._workflow import load_workflow as load_workflow
from ._workflow import resolve_entrypoint as resolve_entrypoint
from ._workflow import state_migration as state_migration

__all__ = [
    "DEFAULT_STEP_RETRY",
    "ApprovalDecision",
    "Cancel",
    "ChildEnded",
    "Context",
    "Handler",
    "Item",
    "Mail",
    "Minter",
    "Runs",
    "RunsConfig",
    "ScheduleFire",
    "Signal",
    "Start",
    "StateMigration",
    "StepRecorder",
    "StepRetry",
    "Steps",
    "Timer",
    "Versions",
    "cancel_order",
    "check_events",
    "derived_id",
    "item_of",
    "load_workflow",
    "resolve_entrypoint",
    "state_migration",
    "state_snapshot",
]
