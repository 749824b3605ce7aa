"""Delivery frames: mail (and the timer and schedule items riding as mail) to
the sidecar, its acknowledgements, and the claim-checked bodies fetched."""

from __future__ import annotations

from typing import Any

import msgspec

from .._mail import MailContext
from .._reasons import AckResult
from ._format import BATCH_FORMAT, _Frame


class Claim(msgspec.Struct, kw_only=True):
    """A claim check: the body is kept by the hub under this digest."""

    digest: str  # "sha256:<hex>"
    size: int


RESUME_KIND = "resume"
"""The ``kind`` of the dispatch that resumes a suspended run: minted by the
hub (a resume, a new version), taken by the sidecar ahead of what the run
holds, never shown to a handler."""


CANCEL_KIND = "cancel"
"""The ``kind`` of the dispatch that cancels a run from outside (``POST
/runs/{id}/cancel``): taken ahead of what the run holds; its ``subject`` is
the reason, its body ``{"reason", "terminate"}`` as JSON. Without
``terminate`` the handler sees it and the run ends ``cancelled`` once it is
processed; with it the run ends at once, unseen."""


TIMER_KIND = "timer"
"""The ``kind`` of the dispatch a due timer becomes (``ctx.set_timer``): its
``subject`` is the timer's name, its body a :class:`TimerFired` as JSON."""

SCHEDULE_KIND = "schedule"
"""The ``kind`` of the dispatch one fire of a deployment's schedule becomes,
for its top-level run: its ``subject`` is the schedule's, its body a
:class:`ScheduleFired` as JSON."""

APPROVAL_TIMEOUT = "timeout"
"""The ``decision`` of an ``approval`` item whose approval expired undecided
(``ctx.request_approval(prompt, timeout=...)``)."""


class TimerFired(msgspec.Struct, kw_only=True):
    """The body of a ``timer`` item (JSON): the timer as it was set, and when
    the hub fired it (``fired_at - due_at`` says how late, after an outage)."""

    name: str
    due_at: float
    fired_at: float
    payload: Any = None


class ScheduleFired(msgspec.Struct, kw_only=True):
    """The body of a ``schedule`` item (JSON): one fire of a schedule. A fire
    missed while the hub was down comes once, late (``fired_at``), not once
    per missed interval."""

    schedule_id: str
    due_at: float
    fired_at: float
    subject: str = ""
    payload: Any = None


class MailInbound(_Frame, tag=True, kw_only=True):
    """hub -> sidecar (``mail.inbound.<deployment_id>``), answered by Ack."""

    dispatch_id: str
    deployment_id: str
    run_id: str | None = None  # absent in format 1: the run id is ``address``
    address: str
    seq: int | None = None  # absent in format 1
    kind: str = "mail"
    message_id: str | None = None
    sender: str | None = None
    subject: str | None = None
    body: bytes | None = None
    claim: Claim | None = None
    start_request_id: str | None = None
    owner_epoch: int = 0
    session_id: str | None = None
    version: int = 0
    """The workflow version that processes this dispatch (0 from an older hub:
    the deployment's first). ``code`` is the claim check of its sources
    (``Sources`` as JSON, kept by the hub as a blob), for a sidecar that does
    not hold them yet."""
    code: Claim | None = None
    raw: Claim | None = None
    """The message as it came over SMTP, always claim-checked (never inline:
    it repeats the body, and a frame of a hundred of them must stay small).
    An older sidecar ignores it; its handler has no ``item.raw``."""
    context: MailContext | None = None
    """What the hub read from the mail for its run (the address's tag, the
    thread, the sender checks); None for kinds that are not mail and from an
    older hub."""
    trace: dict[str, str] = msgspec.field(default_factory=dict)
    """The W3C trace context (``traceparent``, ``tracestate``) of the hub's
    send of this dispatch, when the hub traces (docs/tracing.md); empty
    otherwise, and from an older hub."""

    @property
    def effective_run_id(self) -> str:
        return self.run_id if self.run_id is not None else self.address


class MailBatch(_Frame, tag=True, kw_only=True):
    """hub -> sidecar (``mail.inbound.<deployment_id>``, format 3): dispatches
    of the deployment in seq order, all stamped with one session, answered by
    one AckBatch. Each item means what it would alone."""

    v: int = BATCH_FORMAT
    items: list[MailInbound]


class Ack(_Frame, tag=True, kw_only=True):
    """sidecar -> hub: the answer to a MailInbound. A refusal names its code in
    ``reason`` (runtime.Reason) and its prose in ``detail``; an older sidecar
    wrote both into ``reason`` (``"digest_mismatch: ..."``)."""

    dispatch_id: str
    result: AckResult
    reason: str = ""
    detail: str = ""


class AckBatch(_Frame, tag=True, kw_only=True):
    """sidecar -> hub: the answer to a MailBatch, one Ack per item, in order.
    A batch with an item the sidecar leaves unanswered (not its owner's) is
    not answered at all: the hub sends it again."""

    v: int = BATCH_FORMAT
    acks: list[Ack]


class BlobGet(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.blob``): one chunk of a claim-checked body."""

    digest: str
    offset: int = 0
    deployment_id: str = ""
    session_id: str = ""


class BlobChunk(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a BlobGet: up to ``BLOB_CHUNK_SIZE``
    bytes of the blob from ``offset``."""

    digest: str
    offset: int
    size: int  # the whole blob's size
    data: bytes
