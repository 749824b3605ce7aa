"""Triggers and receipts: what goes into acceptance and what comes out, and
the trigger of an approval's decision."""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from runtime.wire import MailContext

from ..._errors import HubError


class Trigger(msgspec.Struct, kw_only=True, frozen=True):
    """One inbound item for a run: a mail, a signal or an approval decision.

    Addressed by ``address`` (a deployment's mail address) or by
    ``deployment_id``. ``run_id`` targets one run of that deployment; without
    it the trigger goes to the top-level run, minted on first use. With
    ``approval_id`` the trigger goes to the approval's run, and the approval
    is marked decided (``decision``) in the same transaction.

    ``raw`` is the message as it came over SMTP. It is kept as a blob until
    the dispatch is settled, for the handler's ``item.raw``, and is not part
    of what a message id stands for: the same message relayed again with
    other trace headers is still a retry.

    ``context`` is what the door read from a mail (the recipient as written,
    its tag, the thread it answers): kept with the dispatch and sent in
    ``MailInbound.context``. The accept path completes it as it routes the
    mail (``routing.py``: a reply finds the run that sent what it answers);
    None for items that are not mail. Not part of what a message id stands
    for either.
    """

    address: str | None = None
    deployment_id: str | None = None
    run_id: str | None = None
    kind: str = "mail"
    message_id: str | None = None
    sender: str | None = None
    subject: str | None = None
    body: bytes = b""
    digest: str | None = None  # body_digest(body); precompute it off-loop for big bodies
    approval_id: str | None = None
    decision: str | None = None
    raw: bytes | None = None
    raw_digest: str | None = None  # body_digest(raw), precomputed like ``digest``
    context: MailContext | None = None


class Accepted(msgspec.Struct, kw_only=True):
    status: Literal["accepted"] = "accepted"
    dispatch_id: str
    run_id: str
    deployment_id: str
    seq: int
    duplicate: bool = False


class Rejected(msgspec.Struct, kw_only=True):
    status: Literal["rejected"] = "rejected"
    reason: str
    detail: str


WITH_OTHERS = "not_accepted_with_others"
"""The reason of a trigger that would have been accepted, answered for one
of a whole (``Acceptor.accept_many(whole=True)``) of which another was not."""


class RefusedByRun(Rejected, kw_only=True):
    """The answer to a retry of a trigger that was accepted, and then refused
    by its run because the run had ended before it came to that dispatch
    (``workflow_run_terminal``). It names the dispatch the first receipt named."""

    dispatch_id: str
    run_id: str
    deployment_id: str
    seq: int


Receipt = Accepted | Rejected
Outcome = Accepted | Rejected | HubError


def decision_trigger(approval_id: str, decision: str) -> Trigger:
    """The trigger of one decision of an approval (``approve``, ``reject``,
    or the hub's ``timeout``): an ``approval`` item to its run, whose body is
    the item's (docs/sidecar.md, "Items")."""
    return Trigger(
        kind="approval",
        approval_id=approval_id,
        decision=decision,
        # The same decision retried returns the first receipt; another one
        # finds the approval decided.
        message_id=f"approval:{approval_id}:{decision}",
        subject=decision,
        body=msgspec.json.encode({"approval_id": approval_id, "decision": decision}),
    )


def body_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()
