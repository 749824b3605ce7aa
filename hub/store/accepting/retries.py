"""What a message id stands for: a retry must bring the same content, and a
retry of a dispatch that its run refused is answered with that refusal.

Message ids are unique per deployment (``dispatch_message_id``): a trigger
with one the deployment has seen is a retry, answered with the first
receipt, or refused (``message_id_reused``) if it brings anything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runtime import Reason

from ..schema import DispatchStatus
from .triggers import Accepted, RefusedByRun, Trigger, body_digest


@dataclass(frozen=True)
class Content:
    """What a message id stands for: a retry must bring the same.

    The recipient is implied (message ids are unique per deployment). A body
    is compared as its bytes when they are at hand (a dispatch's inline body,
    a trigger earlier in the batch), else by sha256 and size (a claim-checked
    dispatch keeps only those): both are exact. A missing sender or subject
    equals an empty one (release 1 stored NULL where this one stores "").
    """

    kind: str
    sender: str
    subject: str
    body: bytes | None  # None: only the digest and size are known
    digest: str | None
    size: int

    @classmethod
    def of(cls, t: Trigger) -> Content:
        return cls(t.kind, t.sender or "", t.subject or "", t.body, None, len(t.body))

    @classmethod
    def stored(cls, row: Sequence[Any]) -> Content:
        """From a dispatch's ``kind, sender, subject, body``, its digest (a
        claim check's, or a processed inline body's) and ``body_size``."""
        kind, sender, subject, body, digest, size = row
        inline = bytes(body or b"") if digest is None else None
        return cls(kind, sender or "", subject or "", inline, digest, size)

    def differences(self, t: Trigger) -> list[str]:
        """The fields in which ``t`` is not a retry of this content."""
        different = [
            name
            for name, mine, theirs in (
                ("kind", self.kind, t.kind),
                ("from", self.sender, t.sender or ""),
                ("subject", self.subject, t.subject or ""),
            )
            if mine != theirs
        ]
        if self.body is not None:
            same_body = self.body == t.body
        else:  # the size first: a digest costs a pass over the body
            same_body = self.size == len(t.body) and self.digest == (
                t.digest or body_digest(t.body)
            )
        return different if same_body else [*different, "body"]


def refused_by_run(first: Accepted, status: str, error: str | None) -> RefusedByRun | None:
    """What a retry learns of a dispatch its run refused (it had ended first).

    The hub accepts a trigger while the run is live by what the hub knows; the
    sidecar may have completed the run before the hub hears of it. Such a
    dispatch is cancelled once the sidecar refuses it, and from then on its
    message id is answered with the refusal instead of the stale receipt, so
    the sender learns the outcome (docs/faults.md, F14).
    """
    if status != DispatchStatus.CANCELLED or error != Reason.WORKFLOW_RUN_TERMINAL:
        return None
    return RefusedByRun(
        reason=Reason.WORKFLOW_RUN_TERMINAL,
        detail=f"run {first.run_id} ended before it came to dispatch {first.dispatch_id}",
        dispatch_id=first.dispatch_id,
        run_id=first.run_id,
        deployment_id=first.deployment_id,
        seq=first.seq,
    )
