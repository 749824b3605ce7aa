"""The sidecar: one OS process per deployment (``python -m sidecar``).

It boots from its restore record alone, keeps a durable inbox, processes
each run's dispatches in seq order through the deployment's workflow code,
and ships the resulting events to the hub.
"""

from ._app import Sidecar as Sidecar
from ._app import SidecarOptions as SidecarOptions
from ._errors import BlobError as BlobError
from ._errors import DeploymentGone as DeploymentGone
from ._errors import DigestMismatch as DigestMismatch
from ._errors import DuplicateStep as DuplicateStep
from ._errors import EntrypointError as EntrypointError
from ._errors import FencedOut as FencedOut
from ._errors import HandlerTimeout as HandlerTimeout
from ._errors import HomeLocked as HomeLocked
from ._errors import HubRefused as HubRefused
from ._errors import HubUnavailable as HubUnavailable
from ._errors import InboxConflict as InboxConflict
from ._errors import InboxError as InboxError
from ._errors import InboxSchemaTooNew as InboxSchemaTooNew
from ._errors import InvalidMail as InvalidMail
from ._errors import InvalidStep as InvalidStep
from ._errors import InvalidTimer as InvalidTimer
from ._errors import JoinTokenError as JoinTokenError
from ._errors import LimitExceeded as LimitExceeded
from ._errors import OwnerConflict as OwnerConflict
from ._errors import RestoreRecordMissing as RestoreRecordMissing
from ._errors import RunAlreadyEnded as RunAlreadyEnded
from ._errors import RunStateUnreadable as RunStateUnreadable
from ._errors import SidecarError as SidecarError
from ._errors import StateNotSerializable as StateNotSerializable
from ._errors import StepError as StepError
from ._errors import StepFailed as StepFailed
from ._errors import StepNotRecorded as StepNotRecorded
from ._errors import WorkflowLoadError as WorkflowLoadError
from .execution import ApprovalDecision as ApprovalDecision
from .execution import Attachment as Attachment
from .execution import AuthVerdict as AuthVerdict
from .execution import Bounce as Bounce
from .execution import Cancel as Cancel
from .execution import ChildEnded as ChildEnded
from .execution import Context as Context
from .execution import Item as Item
from .execution import Mail as Mail
from .execution import MailAuth as MailAuth
from .execution import RunsConfig as RunsConfig
from .execution import ScheduleFire as ScheduleFire
from .execution import Signal as Signal
from .execution import Start as Start
from .execution import StepRetry as StepRetry
from .execution import Timer as Timer
from .execution import load_workflow as load_workflow
from .storage import Inbox as Inbox

__all__ = [
    "ApprovalDecision",
    "Attachment",
    "AuthVerdict",
    "BlobError",
    "Bounce",
    "Cancel",
    "ChildEnded",
    "Context",
    "DeploymentGone",
    "DigestMismatch",
    "DuplicateStep",
    "EntrypointError",
    "FencedOut",
    "HandlerTimeout",
    "HomeLocked",
    "HubRefused",
    "HubUnavailable",
    "Inbox",
    "InboxConflict",
    "InboxError",
    "InboxSchemaTooNew",
    "InvalidMail",
    "InvalidStep",
    "InvalidTimer",
    "Item",
    "JoinTokenError",
    "LimitExceeded",
    "Mail",
    "MailAuth",
    "OwnerConflict",
    "RestoreRecordMissing",
    "RunAlreadyEnded",
    "RunStateUnreadable",
    "RunsConfig",
    "ScheduleFire",
    "Sidecar",
    "SidecarError",
    "Signal",
    "Start",
    "StateNotSerializable",
    "StepError",
    "StepFailed",
    "StepNotRecorded",
    "StepRetry",
    "Timer",
    "WorkflowLoadError",
    "load_workflow",
]
