"""The wire contract: every frame on NATS is one of these msgspec Structs
(the run events a ``RunEvents`` frame carries are in ``_events.py``).

Frames are msgpack maps tagged by ``t`` (the class name) and carry ``v``, the
format version of the writer. Decoders ignore fields they do not know and
fill defaults for fields an older writer lacked, so adding a field with a
default is always compatible; renaming or removing one is not.

Format history:
  1  release 1: MailInbound had no ``run_id`` (the run id was the address).
  2  release 2.
  3  MailBatch and AckBatch: several dispatches in one frame. A sidecar that
     lists 3 in ``Hello.formats`` gets them; the hub sends an older one single
     MailInbound frames. Every other frame is still written as format 2.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._events import Event, StepRecorded
from ._mail import MailContext
from ._reasons import AckResult, OnFailure

FORMAT_VERSION = 2
BATCH_FORMAT = 3
SUPPORTED_FORMATS = (1, 2, BATCH_FORMAT)
INLINE_BODY_LIMIT = 64 * 1024
"""Bodies above this size travel as a claim check; the hub keeps the blob."""
BLOB_CHUNK_SIZE = 512 * 1024
"""Bytes per BlobChunk reply (NATS' default max_payload is 1 MiB)."""


class _Frame(msgspec.Struct, tag_field="t", kw_only=True, omit_defaults=False):
    v: int = FORMAT_VERSION


# --- sessions ---------------------------------------------------------------


class Hello(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.hello``). Without ``nonce``/``signature`` the hub
    answers Challenge; signed over :func:`runtime.hello_message` it answers
    Welcome or Refused."""

    deployment_id: str
    instance_id: str
    public_key: str
    nonce: str | None = None
    signature: bytes | None = None
    formats: list[int] = msgspec.field(default_factory=lambda: list(SUPPORTED_FORMATS))
    takeover: bool = False
    home: str = ""
    """Where this process keeps the deployment's state: an id of the state
    directory itself (not of any file in it), so a copy of the directory has
    another home. ``instance_id`` is new with every process start. An older
    sidecar sends no home: its (persistent) instance id stands for it."""
    previous_instance: str = ""
    """The persistent instance id an earlier release kept in the restore
    record, sent until the first welcome: a deployment owned before homes
    were recorded is taken back at once by a process in its own directory."""


class Challenge(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to an unsigned Hello: the nonce its signed
    Hello must sign (single use, 30 s)."""

    nonce: str


class FailurePolicy(msgspec.Struct, kw_only=True, frozen=True):
    """A deployment's retry budget and what happens past it
    (docs/design.md section 5, "When a handler fails")."""

    on_failure: str = OnFailure.SUSPEND
    """runtime.OnFailure: ``suspend``, ``park`` or ``fail``."""
    max_attempts: int = 5
    """Handler calls an item gets (a crash of the sidecar while it was being
    processed counts as one) before ``on_failure`` applies."""
    max_backoff: float = 60.0
    """Seconds at most between two attempts (the backoff doubles from 0.1 s,
    with jitter)."""
    handler_timeout: float = 300.0
    """Seconds a handler call may run; a longer one is a failed attempt."""
    max_concurrent_runs: int = 16
    """Handler calls of the deployment at once, each of another run (a run's
    items stay in its seq order). Not a failure setting, but one of the
    deployment's run settings the sidecar is told the same way."""


LEGACY_POLICY = FailurePolicy(on_failure=OnFailure.FAIL)
"""The policy of a sidecar whose hub sends none (an older hub knows no
suspended run nor parked dispatch): a run fails past its budget."""


class Welcome(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a signed Hello that owns the deployment:
    the session every later frame is stamped with, and its owner epoch."""

    session_id: str
    owner_epoch: int
    hub_boot_id: str
    floor_seq: int = 0
    """Every dispatch of the deployment with ``seq <= floor_seq`` is settled at
    the hub (processed or cancelled), so the sidecar never waits for one of
    them (an inbox from release 1, or one that lags the hub). 0: no claim."""
    from_hub: bool = False
    """Ownership came here from another home: the local state of every run is
    not the owner's. The sidecar replaces it with the hub's (``StateGet``) and
    drops its unshipped events before it acts; the hub delivers again
    everything it did not apply."""
    policy: FailurePolicy | None = None
    """The deployment's failure policy (None from an older hub:
    :data:`LEGACY_POLICY`); a change comes later as :class:`SetPolicy`."""


class Sleep(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.sleep``), answered by Asleep or Refused: the
    sidecar has had nothing to do for its idle time (every item processed,
    every event taken by the hub), takes no more deliveries, and asks to stop.
    The hub grants it only while the deployment has no dispatch waiting for
    delivery, in the transaction that marks the deployment asleep; else it
    answers ``Refused(busy)`` and the sidecar goes on as before."""

    deployment_id: str = ""
    session_id: str
    owner_epoch: int


class Asleep(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a granted Sleep: the deployment is asleep
    from now, its session ended. The sidecar exits with
    ``SidecarExit.ASLEEP``; the deployment's next item (mail, timer, schedule,
    child event, decision) has its supervisor start it again."""

    deployment_id: str = ""


class Fenced(_Frame, tag=True, kw_only=True):
    """hub -> sidecar on its inbound subject, unanswered: the deployment was
    deleted or moved to another owner. A notice, not a proof: the sidecar
    says hello again, and the hub's answer decides whether it stops."""

    deployment_id: str
    owner_epoch: int = 0
    reason: str = ""


class Refused(_Frame, tag=True, kw_only=True):
    """Any request the hub will not serve. ``reason`` is a code (runtime.Reason),
    ``detail`` the prose that goes with it."""

    reason: str
    detail: str = ""


class HubBoot(_Frame, tag=True, kw_only=True):
    """hub -> all (``hub.announce``): a hub (re)started; sidecars re-hello."""

    boot_id: str


# --- delivery ---------------------------------------------------------------


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


class Ping(_Frame, tag=True, kw_only=True):
    """hub -> sidecar on its inbound subject: a liveness probe, answered by Pong.

    It travels the same subject and the same delivery loop as MailInbound, so
    a sidecar whose delivery is wedged stays silent to it. A sidecar older
    than this frame answers ``Ack refused decode_error``: alive all the same.
    """

    session_id: str = ""


class Pong(_Frame, tag=True, kw_only=True):
    """sidecar -> hub, the answer to a Ping, from the delivery loop."""

    deployment_id: str = ""


class LoadVersion(_Frame, tag=True, kw_only=True):
    """hub -> sidecar on its inbound subject, answered by VersionLoaded: load
    ``version`` (its sources fetched by the ``code`` claim check) and say
    whether it imports and has its entrypoint, before the hub makes it active."""

    session_id: str = ""
    version: int
    code: Claim


class VersionLoaded(_Frame, tag=True, kw_only=True):
    """``error`` is empty when the version loaded and is kept, else why not."""

    deployment_id: str = ""
    version: int
    error: str = ""


class SetPolicy(_Frame, tag=True, kw_only=True):
    """hub -> sidecar on its inbound subject, answered by PolicySet: the
    deployment's failure policy changed (``PATCH``); it applies from the
    next handler call on."""

    session_id: str = ""
    policy: FailurePolicy


class PolicySet(_Frame, tag=True, kw_only=True):
    """sidecar -> hub, the answer to a SetPolicy: the policy is in force."""

    deployment_id: str = ""


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


class MintChild(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.mint``): mint a child run before spawning it."""

    parent_run_id: str
    request_id: str
    deployment_id: str = ""
    session_id: str = ""
    owner_epoch: int = 0


class Minted(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a MintChild: the child run's id (the same
    one again for the same request)."""

    run_id: str


class StateGet(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.state``): a page of the hub's applied state of the
    deployment's runs, ordered by run id, after ``after_run_id``."""

    deployment_id: str
    session_id: str
    owner_epoch: int
    after_run_id: str = ""


class RunSnapshot(msgspec.Struct, kw_only=True):
    """What the hub applied of one run: state as of ``last_seq``."""

    run_id: str
    status: str
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    last_seq: int = 0
    result: Any = None
    error: str | None = None
    last_step: int = 0
    """The run's count of processed items as of ``state`` (DispatchProcessed.step)."""
    approvals: list[str] = msgspec.field(default_factory=list)
    """The approvals the run waits for (status ``waiting``): their decisions
    are processed at once, anything else is held until none is left."""
    parent_run_id: str | None = None
    entrypoint: str | None = None
    """A child run's handler (``module:attr`` in the deployment's sources)."""
    version: int = 0
    """The workflow version that processed the run's latest item (0: none yet)."""
    steps: list[StepRecorded] = msgspec.field(default_factory=list)
    """The steps recorded for the run's dispatches the hub has not settled: a
    new owner processing one of them again returns these results instead of
    calling the steps' functions again. Empty from an older hub."""


class RunStates(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a StateGet: one page of the hub's
    RunSnapshots (``more``: another page follows)."""

    runs: list[RunSnapshot]
    floor_seq: int = 0
    more: bool = False
    settled: list[int] = msgspec.field(default_factory=list)
    """Seqs above ``floor_seq`` that are settled all the same (a waiting run
    held the dispatches before them): the new owner never waits for them."""


# --- mail ingress (producers) ------------------------------------------------


class IngressMail(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One mail of an IngressBatch: the fields, names and rules of one mail
    of ``POST /mail/batch`` (``from`` included), as a msgpack map. A body
    that is not UTF-8 text goes as ``body_b64``."""

    to: str
    subject: str = ""
    body: str | None = None
    body_b64: str | None = None
    message_id: str | None = None
    sender: str | None = msgspec.field(default=None, name="from")
    in_reply_to: str | None = None
    """The Message-ID the mail answers (``<id@host>``): a reply to mail a
    run of the deployment sent goes to that run (docs/smtp.md, "Replies")."""
    references: list[str] = msgspec.field(default_factory=list)
    """The Message-IDs of the thread before it, oldest first."""


class IngressBatch(_Frame, tag=True, kw_only=True):
    """producer -> hub (``<prefix>.ingress.<producer id>``), answered by
    IngressReceipts, or by Refused when the request is refused whole
    (``unknown_producer``, ``invalid_request``: not 1 to 500 mails,
    ``decode_error``, ``store_unavailable``).

    Each item is an encoded IngressMail, decoded on its own: a malformed
    mail is that mail's error, and its batch mates go on, as in
    ``POST /mail/batch``."""

    mails: list[msgspec.Raw]


class IngressReceipt(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One mail's answer, with the keys its receipt or error has in the JSON
    of ``POST /mail/batch``: accepted ``{status, dispatch_id, run_id,
    deployment_id, seq, duplicate}``; rejected or an error ``{status,
    reason, detail}`` (a retry of a mail its run refused adds the first
    receipt's ``dispatch_id``, ``run_id``, ``deployment_id``, ``seq``)."""

    status: str  # "accepted", "rejected" or "error"
    reason: str | None = None
    detail: str | None = None
    dispatch_id: str | None = None
    run_id: str | None = None
    deployment_id: str | None = None
    seq: int | None = None
    duplicate: bool | None = None

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"


class IngressReceipts(_Frame, tag=True, kw_only=True):
    """hub -> producer: one IngressReceipt per mail of the IngressBatch, in order."""

    receipts: list[IngressReceipt]


class RunEvents(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.events``), answered by EventsAck or Refused."""

    deployment_id: str = ""
    session_id: str
    owner_epoch: int
    events: list[Event]


class EventsAck(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a RunEvents: the ids of the events it has
    taken (applied now or before), which the sidecar sends no more."""

    ids: list[str]
    floor_seq: int = 0
    """As a Welcome's: every dispatch with ``seq <= floor_seq`` is settled at
    the hub once these events are applied (0: no claim). The sidecar raises
    its position to it: a release 1 envelope processed before the hub's frame
    could tell its seq leaves a gap nothing else would close until the next
    session. Added within format 2; an older reader ignores it."""


Frame = (
    Hello
    | Challenge
    | Welcome
    | Refused
    | HubBoot
    | Fenced
    | Sleep
    | Asleep
    | MailInbound
    | MailBatch
    | Ping
    | Pong
    | LoadVersion
    | VersionLoaded
    | SetPolicy
    | PolicySet
    | Ack
    | AckBatch
    | BlobGet
    | BlobChunk
    | MintChild
    | Minted
    | StateGet
    | RunStates
    | RunEvents
    | EventsAck
    | IngressBatch
    | IngressReceipts
)
