"""The test kit's errors: what the hub would refuse, raised in the test.

They sit under the sidecar's root (:class:`~sidecar.SidecarError`), each
naming the hub's reason for the same refusal (``reason``)::

    SidecarError
      KitError
        ApprovalDecided      409 approval_decided: decided already, or timed out
        UnknownApproval      404 unknown_approval
        UnknownRun           404 unknown_run
        UnknownMail          no run of the test sent that mail
        RunEnded             409 workflow_run_terminal: the run takes no more items
        NotSettled           the workflow did not come to rest in time
"""

from __future__ import annotations

from .._errors import SidecarError


class KitError(SidecarError):
    """What the kit refuses, as the hub would; ``reason`` is the hub's code."""

    reason = "kit_error"


class ApprovalDecided(KitError):
    """The approval was decided already (or timed out): the hub answers 409."""

    reason = "approval_decided"


class UnknownApproval(KitError):
    reason = "unknown_approval"


class UnknownRun(KitError):
    reason = "unknown_run"


class UnknownMail(KitError):
    """A reply or a bounce names a mail no run of the test sent."""

    reason = "unknown_mail"


class RunEnded(KitError):
    """The run has ended: the hub accepts no more items for it."""

    reason = "workflow_run_terminal"


class NotSettled(KitError):
    """The runs were still busy when the kit's patience ran out (a handler
    that loops on its own mail, say)."""

    reason = "not_settled"
