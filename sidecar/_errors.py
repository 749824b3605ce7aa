"""The sidecar's exceptions: one root (under runtime's), one subclass per failure.

The tree (a second base in parentheses)::

    runtime.MailrunError
      SidecarError
        RestoreRecordMissing
        HomeLocked
        JoinTokenError (ValueError)
        InboxError
          InboxSchemaTooNew
          InboxConflict
          RunStateUnreadable
        WorkflowLoadError
          EntrypointError
        StateNotSerializable (TypeError)
        LimitExceeded (ValueError)
        RunAlreadyEnded
        InvalidTimer (ValueError)
        InvalidMail (ValueError)
        StepError
          InvalidStep (ValueError)
          DuplicateStep (ValueError)
          StepFailed              carries the step's name, error and attempts
          StepNotRecorded         replay only: no recorded result to return
        HandlerTimeout (TimeoutError)
        HubUnavailable (TimeoutError)
        HubRefused              carries the hub's reason code and detail
          FencedOut               final: this process must stop
            OwnerConflict
            DeploymentGone
        BlobError
          DigestMismatch
"""

from __future__ import annotations

from runtime import MailrunError
from runtime.wire import SizeLimit


class SidecarError(MailrunError):
    """Root of every error the sidecar raises on purpose."""


class RestoreRecordMissing(SidecarError):
    """No restore record to boot from (or several, and no ``--deployment``)."""


class HomeLocked(SidecarError):
    """Another sidecar process runs from the same state directory."""


class JoinTokenError(SidecarError, ValueError):
    """A ``--join`` token that is not base64url of a restore record."""


class InboxError(SidecarError):
    """Root of the durable inbox's errors."""


class InboxSchemaTooNew(InboxError):
    """The inbox was written by a newer release; this one will not touch it."""


class InboxConflict(InboxError):
    """A commit raced another writer of the processing position; nothing was written."""


class RunStateUnreadable(InboxError):
    """A run's stored state cannot be decoded; the run fails with this reason."""


class WorkflowLoadError(SidecarError):
    """The deployment's sources could not be written or imported."""


class EntrypointError(WorkflowLoadError):
    """The entrypoint is missing, malformed, or not an async function."""


class StateNotSerializable(SidecarError, TypeError):
    """``ctx.state`` (or a run result) is not JSON-able, so it cannot be persisted."""


class LimitExceeded(SidecarError, ValueError):
    """A value the handler made is larger than its size limit (``runtime.wire.SIZE_LIMITS``).

    The run fails at once, not after its retry budget: the same call on the
    same item makes the same value again, so a retry cannot succeed."""

    def __init__(self, what: str, size: int, limit: SizeLimit) -> None:
        super().__init__(
            f"{what} is {size} bytes encoded, over the limit {limit.name} = {limit.bytes} bytes"
        )
        self.size = size
        self.limit = limit


class RunAlreadyEnded(SidecarError):
    """The handler called ``complete``/``fail`` twice for one run."""


class InvalidTimer(SidecarError, ValueError):
    """``ctx.set_timer``/``cancel_timer`` called with what makes no timer: no
    name, ``after`` and ``at`` together (or neither), a negative or
    non-finite delay, a naive datetime, a payload not JSON-able."""


class InvalidMail(SidecarError, ValueError):
    """``ctx.send`` called with what makes no mail: a recipient (or cc,
    reply-to) that is not one bare address, a header with a line break or
    one the hub writes itself, an attachment of no known shape."""


class StepError(SidecarError):
    """Root of ``ctx.step``'s errors."""


class InvalidStep(StepError, ValueError):
    """``ctx.step`` called with no name, a name too long, or a bad retry policy."""


class DuplicateStep(StepError, ValueError):
    """A second ``ctx.step`` of the same name while one item is processed:
    a step is found again by its name, so names are unique within an item."""


class StepFailed(StepError):
    """The step failed for good: its retries were spent (or it failed so when
    the item was processed before). ``error`` is ``Type: message`` of the
    last attempt; the step is not called again for this item."""

    def __init__(self, name: str, error: str, attempts: int) -> None:
        super().__init__(f"step {name!r} failed after {attempts} attempt(s): {error}")
        self.name = name
        self.error = error
        self.attempts = attempts


class StepNotRecorded(StepError):
    """Replay only: the run recorded no result for this step at this item,
    and a replay never calls a step's function."""


class HandlerTimeout(SidecarError, TimeoutError):
    """The workflow handler did not return within the sidecar's handler timeout."""


class HubUnavailable(SidecarError, TimeoutError):
    """The hub did not answer (no session, timeout, or nobody listening)."""


class HubRefused(SidecarError):
    """The hub answered ``Refused``; ``reason`` is its code (runtime.Reason)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"hub refused: {reason}" + (f" ({detail})" if detail else ""))
        self.reason = reason
        self.detail = detail


class FencedOut(HubRefused):
    """The hub will not let this process act for the deployment again: it stops."""


class OwnerConflict(FencedOut):
    """Another sidecar process owns this deployment (start with ``--takeover`` to move it)."""


class DeploymentGone(FencedOut):
    """The deployment was deleted (or this hub does not know it)."""


class BlobError(SidecarError):
    """A claim-checked body could not be fetched intact."""


class DigestMismatch(BlobError):
    """The fetched body's size or sha256 differs from its claim check."""
