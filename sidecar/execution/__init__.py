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
from .code import Handler as Handler
from .code import StateMigration as StateMigration
from .code import Versions as Versions
from .code import load_workflow as load_workflow
from .code import resolve_entrypoint as resolve_entrypoint
from .code import state_migration as state_migration
from .handler_io import ApprovalDecision as ApprovalDecision
from .handler_io import Attachment as Attachment
from .handler_io import AuthVerdict as AuthVerdict
from .handler_io import Bounce as Bounce
from .handler_io import Cancel as Cancel
from .handler_io import ChildEnded as ChildEnded
from .handler_io import Item as Item
from .handler_io import Mail as Mail
from .handler_io import MailAuth as MailAuth
from .handler_io import ScheduleFire as ScheduleFire
from .handler_io import Signal as Signal
from .handler_io import Start as Start
from .handler_io import Timer as Timer
from .handler_io import cancel_order as cancel_order
from .handler_io import item_of as item_of
from .handler_io import mail_domain as mail_domain
from .handler_io import wire_auth as wire_auth

__all__ = [
    "DEFAULT_STEP_RETRY",
    "ApprovalDecision",
    "Attachment",
    "AuthVerdict",
    "Bounce",
    "Cancel",
    "ChildEnded",
    "Context",
    "Handler",
    "Item",
    "Mail",
    "MailAuth",
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
    "mail_domain",
    "resolve_entrypoint",
    "state_migration",
    "state_snapshot",
    "wire_auth",
]
