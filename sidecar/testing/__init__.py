"""A test kit for workflow authors: a workflow run in a unit test, in
milliseconds, on the sidecar's own runs, with the hub played in memory and
time skipped instead of waited for (docs/testing-workflows.md).

    async with WorkflowTest(main) as wf:
        await wf.mail("hello")
        await wf.skip(3 * 86400)
        assert wf.sent[0].subject == "reminder"
"""

from ._errors import ApprovalDecided as ApprovalDecided
from ._errors import KitError as KitError
from ._errors import NotSettled as NotSettled
from ._errors import RunEnded as RunEnded
from ._errors import UnknownApproval as UnknownApproval
from ._errors import UnknownMail as UnknownMail
from ._errors import UnknownRun as UnknownRun
from ._kit import WorkflowTest as WorkflowTest
from ._views import Delivered as Delivered
from ._views import PendingApproval as PendingApproval
from ._views import PendingTimer as PendingTimer
from ._views import RecordedStep as RecordedStep
from ._views import RunView as RunView
from ._views import SentMail as SentMail

__all__ = [
    "ApprovalDecided",
    "Delivered",
    "KitError",
    "NotSettled",
    "PendingApproval",
    "PendingTimer",
    "RecordedStep",
    "RunEnded",
    "RunView",
    "SentMail",
    "UnknownApproval",
    "UnknownMail",
    "UnknownRun",
    "WorkflowTest",
]
