"""What each golden file holds: the expected value, how it decodes, how it was written.

``tests/golden/v<N>/`` keeps the bytes format version N wrote. The files are
written once by ``generate.py`` and then never rewritten: a format change
adds a ``v<N+1>`` set, and every older file must keep decoding (this is what
tests/runtime/wire/test_golden.py checks) into the value listed here. Expected values pin
``v`` to the version that wrote them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from runtime import (
    Ack,
    AckBatch,
    ApprovalRequested,
    BlobChunk,
    BlobGet,
    Challenge,
    ChildRunStarted,
    Claim,
    DispatchProcessed,
    EnvelopeQuarantined,
    Event,
    EventsAck,
    Fenced,
    Hello,
    HubBoot,
    LoadVersion,
    MailBatch,
    MailInbound,
    MailSent,
    MintChild,
    Minted,
    Ping,
    Pong,
    Refused,
    RestoreRecord,
    RunCancelled,
    RunCompleted,
    RunEvents,
    RunFailed,
    RunSnapshot,
    RunStarted,
    RunStates,
    Sources,
    StateGet,
    VersionLoaded,
    Welcome,
    encode,
)
from runtime.sidecar_contract import HubKey
from runtime.sidecar_contract._restore import RECORD_VERSION
from runtime.wire import (
    BOUNCE_KIND,
    CANCEL_KIND,
    RESUME_KIND,
    ROUTED_BY_HEADERS,
    SCHEDULE_KIND,
    TIMER_KIND,
    Asleep,
    Attachment,
    AuthVerdict,
    BounceReport,
    FailurePolicy,
    IngressBatch,
    IngressMail,
    IngressReceipt,
    IngressReceipts,
    MailAuth,
    MailContext,
    PolicySet,
    RunSuspended,
    ScheduleFired,
    SetPolicy,
    Sleep,
    StepRecorded,
    TimerCancelled,
    TimerFired,
    TimerSet,
    b64url,
    public_key_of,
)
from sidecar.storage import Envelope, encode_envelope, encode_run_state

ROOT = Path(__file__).parent

DEP = "dep_" + "0a" * 13
RUN = "run_" + "1b" * 13
CHILD = "run_" + "2c" * 13
DSP = "dsp_" + "3d" * 13
SES = "ses_" + "4e" * 13
INS = "ins_" + "5f" * 13
BOOT = "boot_" + "60" * 13
EVT = "evt_" + "71" * 13
ADDRESS = "golden@mailrun.local"
SEED = b64url(bytes(range(32)))
PUBLIC_KEY = public_key_of(SEED)
AT = 1_767_225_600.25
STATE = {"seen": [{"subject": "hello", "size": 5}], "count": 1}
FILES = {"flow.py": "async def main(ctx, item):\n    pass\n"}
SOURCES: dict[str, Any] = {"entrypoint": "flow:main", "files": FILES}


@dataclass(frozen=True)
class Golden:
    path: str  # relative to tests/golden
    kind: str  # frame | event | restore_record | envelope | run_state
    expected: Any
    write: Callable[[], bytes]

    @property
    def file(self) -> Path:
        return ROOT / self.path


class EventsAckBeforeFloor(msgspec.Struct, tag_field="t", tag="EventsAck", kw_only=True):
    """An EventsAck as format 2 wrote it before ``floor_seq`` was added: how
    v2/EventsAck.msgpack was written, and how an older reader reads one."""

    v: int = 2
    ids: list[str]


class AckBeforeDetail(msgspec.Struct, tag_field="t", tag="Ack", kw_only=True):
    """An Ack as format 2 wrote it before ``detail`` was added: how
    v2/Ack.msgpack was written, and how an older reader reads an Ack."""

    v: int = 2
    dispatch_id: str
    result: str
    reason: str = ""


_ADDED_IN_FORMAT_2 = {
    "Hello": ("home", "previous_instance"),
    "Welcome": ("from_hub", "policy"),
    "MailSent": (
        "message_id",
        "header_id",
        "html",
        "cc",
        "reply_to",
        "in_reply_to",
        "references",
        "headers",
        "attachments",
        "trace",
    ),
    "MailInbound": ("version", "code", "raw", "context", "trace"),
    "DispatchProcessed": ("step", "version", "error", "trace"),
    "ChildRunStarted": ("trace",),
    "RunStates": ("settled",),
    "RunSnapshot": ("last_step", "approvals", "parent_run_id", "entrypoint", "version", "steps"),
    "ApprovalRequested": ("expires_at",),
    "Envelope": ("version", "raw", "context"),
}
"""Fields added to a format 2 frame (or record) after its golden file was written."""


def _strip(data: dict[str, Any], name: str) -> dict[str, Any]:
    for field in _ADDED_IN_FORMAT_2.get(name, ()):
        data.pop(field, None)
    for event in data.get("events") or ():  # RunEvents
        _strip(event, event.get("t", ""))
    for run in data.get("runs") or ():  # RunStates
        _strip(run, "RunSnapshot")
    return data


def _as_first_written(value: msgspec.Struct) -> bytes:
    """``value`` as format 2 wrote it before the fields added since (their
    defaults decode the same): how its golden file was made."""
    data = msgspec.msgpack.decode(encode(value))
    return msgspec.msgpack.encode(_strip(data, type(value).__name__))


def _frame(name: str, value: msgspec.Struct) -> Golden:
    return Golden(f"v2/{name}.msgpack", "frame", value, lambda: _as_first_written(value))


def _whole(name: str, value: msgspec.Struct, *, since: tuple[str, ...] = ()) -> Golden:
    """A sample of the fields added within format 2, written as they are now
    but for the fields added ``since`` its file was written."""

    def written() -> bytes:
        data = msgspec.msgpack.decode(encode(value))
        for field in since:
            *outer, last = field.split(".")  # "policy.max_concurrent_runs": a nested one
            part = data
            for key in outer:
                part = part.get(key) or {}
            part.pop(last, None)
        return msgspec.msgpack.encode(data)

    return Golden(f"v2/{name}.msgpack", "frame", value, written)


def _without(value: msgspec.Struct, *fields: str) -> bytes:
    data = msgspec.msgpack.decode(encode(value))
    for field in fields:
        data.pop(field, None)
    return msgspec.msgpack.encode(data)


def _envelope_before_context(envelope: Envelope) -> bytes:
    """An envelope as written before ``context`` was added (it decodes as None)."""
    data = msgspec.msgpack.decode(encode_envelope(envelope))
    data.pop("context", None)
    return msgspec.msgpack.encode(data)


def _event(value: msgspec.Struct) -> Golden:
    path = f"v2/{type(value).__name__}.msgpack"
    return Golden(path, "event", value, lambda: _as_first_written(value))


_MAIL_SENT = MailSent(
    event_id=EVT, run_id=RUN, at=AT, to="x@example.org", subject="hi", message_id=DSP + ":mail:1"
)
_EVENTS_V2: list[Event] = [
    RunStarted(event_id=EVT, run_id=RUN, at=AT),
    DispatchProcessed(
        event_id=EVT, run_id=RUN, at=AT, dispatch_id=DSP, seq=7, state=STATE, outcome="processed"
    ),
    RunCompleted(event_id=EVT, run_id=RUN, at=AT, result={"count": 1}),
    RunFailed(event_id=EVT, run_id=RUN, at=AT, error="ValueError: boom"),
    RunCancelled(event_id=EVT, run_id=RUN, at=AT, reason="deleted"),
    ChildRunStarted(
        event_id=EVT, run_id=RUN, at=AT, child_run_id=CHILD, entrypoint="flow:child", input=[1]
    ),
    MailSent(event_id=EVT, run_id=RUN, at=AT, to="x@example.org", subject="hi", body=b"\x00hi"),
    ApprovalRequested(event_id=EVT, run_id=RUN, at=AT, approval_id="apr_" + "8" * 26, prompt="ok?"),
    EnvelopeQuarantined(
        event_id=EVT, run_id="", at=AT, dispatch_id=DSP, reason="unreadable inbox envelope"
    ),
]

_PROCESSED_V2 = DispatchProcessed(
    event_id=EVT,
    run_id=RUN,
    at=AT,
    dispatch_id=DSP,
    seq=9,
    state=STATE,
    outcome="processed",
    step=3,
    version=2,
)

_SUSPENDED = RunSuspended(
    event_id=EVT, run_id=RUN, at=AT, dispatch_id=DSP, attempts=5, error="RuntimeError: boom"
)
_PARKED = msgspec.structs.replace(
    _PROCESSED_V2, seq=10, step=4, outcome="parked", error="RuntimeError: boom"
)

_TIME_EVENTS: dict[str, Event] = {
    "ApprovalRequested.expires": ApprovalRequested(
        event_id=EVT,
        run_id=RUN,
        at=AT,
        approval_id="apr_" + "9" * 26,
        prompt="ok by Friday?",
        expires_at=AT + 3600,
    ),
    "TimerSet": TimerSet(
        event_id=EVT, run_id=RUN, at=AT, name="remind", due_at=AT + 259_200, payload={"n": 1}
    ),
    "TimerCancelled": TimerCancelled(event_id=EVT, run_id=RUN, at=AT, name="remind"),
    "StepRecorded": StepRecorded(
        event_id=EVT,
        run_id=RUN,
        at=AT,
        dispatch_id=DSP,
        name="create-ticket",
        index=1,
        result={"ticket": "T-1"},
    ),
    "StepRecorded.error": StepRecorded(
        event_id=EVT[:-1] + "2",
        run_id=RUN,
        at=AT,
        dispatch_id=DSP,
        name="charge",
        index=2,
        error="RuntimeError: card declined",
        attempts=3,
    ),
}

_RECORD_V2 = RestoreRecord(
    version=2,
    deployment_id=DEP,
    address=ADDRESS,
    session_id=SES,
    instance_id=INS,
    hub_key=HubKey(seed=SEED),
    public_key=PUBLIC_KEY,
    sources=Sources(entrypoint="flow:main", files=FILES),
    nats_url="nats://127.0.0.1:4222",
    subject_prefix="mailrun",
)

_RECORD_V2_NATS = msgspec.structs.replace(
    _RECORD_V2, nats_seed="SUAGOLDENGOLDENGOLDENGOLDENGOLDENGOLDENGOLDENGOLDENGOLDEN"
)


def _record_json(record: RestoreRecord, *, drop: tuple[str, ...] = ()) -> bytes:
    """A record as ``write_restore_record`` writes it, less the fields in ``drop``."""
    data = msgspec.to_builtins(record)
    for name in drop:
        data.pop(name, None)
    return msgspec.json.format(msgspec.json.encode(data), indent=2)


_ENVELOPE_V2 = Envelope(
    v=2,
    dispatch_id=DSP,
    deployment_id=DEP,
    run_id=RUN,
    address=ADDRESS,
    seq=7,
    kind="mail",
    message_id="m-1",
    sender="a@example.org",
    subject="hello",
    body=b"hello",
    body_digest=None,
    start_request_id=None,
    owner_epoch=3,
)

_RESUME_V2 = msgspec.structs.replace(
    _ENVELOPE_V2,
    dispatch_id=DSP[:-1] + "a",
    seq=8,
    kind=RESUME_KIND,
    message_id=None,
    sender=None,
    subject=None,
    body=b"",
    version=2,
)
_CANCEL_V2 = msgspec.structs.replace(
    _ENVELOPE_V2,
    dispatch_id=DSP[:-1] + "b",
    seq=9,
    kind=CANCEL_KIND,
    message_id="cancel:" + RUN,
    sender=None,
    subject="no longer needed",
    body=b'{"reason":"no longer needed","terminate":false}',
    version=2,
)
_TIMER_V2 = msgspec.structs.replace(
    _ENVELOPE_V2,
    dispatch_id=DSP[:-1] + "c",
    seq=10,
    kind=TIMER_KIND,
    message_id="timer:tmr_" + "7e" * 13,
    sender=None,
    subject="remind",
    body=msgspec.json.encode(TimerFired(name="remind", due_at=AT, fired_at=AT + 0.4, payload=[1])),
    version=2,
)
_SCHEDULE_V2 = msgspec.structs.replace(
    _ENVELOPE_V2,
    dispatch_id=DSP[:-1] + "d",
    seq=11,
    kind=SCHEDULE_KIND,
    message_id=f"schedule:sch_{'8f' * 13}:{AT!r}",
    sender=None,
    subject="daily digest",
    body=msgspec.json.encode(
        ScheduleFired(
            schedule_id="sch_" + "8f" * 13,
            due_at=AT,
            fired_at=AT + 0.2,
            subject="daily digest",
            payload={"kind": "digest"},
        )
    ),
    version=2,
)
_CONTEXT = MailContext(
    to="support+billing@example.org",
    tag="billing",
    in_reply_to="<dsp_" + "6" * 26 + ".1@example.org>",
    thread=["<first@example.net>", "<dsp_" + "6" * 26 + ".1@example.org>"],
    routed_by=ROUTED_BY_HEADERS,
    auth=MailAuth(
        spf=AuthVerdict(result="pass", domain="example.net"),
        dkim=AuthVerdict(result="pass", domain="example.net"),
        dmarc=AuthVerdict(result="fail", domain="example.net", detail="reject"),
    ),
)
_MAIL_WITH_CONTEXT = MailInbound(
    v=2,
    dispatch_id=DSP,
    deployment_id=DEP,
    run_id=RUN,
    address=ADDRESS,
    seq=12,
    message_id="<reply-1@example.net>",
    sender="a@example.net",
    subject="Re: hello",
    body=b"yes",
    owner_epoch=3,
    session_id=SES,
    version=2,
    context=_CONTEXT,
)
_TRACE = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": "vendor=x",
}
_TRACED_EVENTS: list[Event] = [
    DispatchProcessed(
        event_id=EVT, run_id=RUN, at=AT, dispatch_id=DSP, seq=7, step=7, version=1, trace=_TRACE
    ),
    MailSent(
        event_id=EVT,
        run_id=RUN,
        at=AT,
        to="x@example.org",
        message_id=DSP + ":mail:1",
        header_id="<" + DSP + ".1@mailrun.local>",
        trace=_TRACE,
    ),
    ChildRunStarted(
        event_id=EVT, run_id=RUN, at=AT, child_run_id=RUN[:-1] + "9", entrypoint="w:c", trace=_TRACE
    ),
]
_RICH_MAIL = MailSent(
    event_id=EVT,
    run_id=RUN,
    at=AT,
    to="x@example.net",
    subject="Grüße",
    body=b"plain",
    message_id=DSP + ":mail:1",
    header_id="<" + DSP + ".1@example.org>",
    html="<p>rich</p>",
    cc=["y@example.net"],
    reply_to=None,
    in_reply_to="<first@example.net>",
    references=["<first@example.net>"],
    headers={"X-Ticket": "42"},
    attachments=[Attachment(filename="a.csv", content_type="text/csv", data=b"a,b\n1,2\n")],
)
_CONTEXT_V2 = msgspec.structs.replace(
    _ENVELOPE_V2,
    dispatch_id=DSP[:-1] + "e",
    seq=12,
    message_id="<reply-1@example.net>",
    sender="a@example.net",
    subject="Re: hello",
    body=b"yes",
    version=2,
    context=_CONTEXT,
)
_BOUNCE_V2 = msgspec.structs.replace(
    _ENVELOPE_V2,
    dispatch_id=DSP[:-1] + "f",
    seq=13,
    kind=BOUNCE_KIND,
    message_id="bounce:out_" + "5" * 26,
    sender=None,
    subject="<" + DSP + ".1@example.org>",
    body=msgspec.json.encode(
        BounceReport(
            message_id="<" + DSP + ".1@example.org>",
            recipient="x@example.net",
            status="5.1.1",
            diagnostic="550 5.1.1 <x@example.net>: no such user",
            source="relay",
            bounced_at=AT + 1.5,
        )
    ),
    version=2,
)
_POLICY = FailurePolicy(
    on_failure="park", max_attempts=3, max_backoff=30.0, handler_timeout=60.0, max_concurrent_runs=4
)

V2 = [
    _frame(
        "Hello",
        Hello(
            v=2,
            deployment_id=DEP,
            instance_id=INS,
            public_key=PUBLIC_KEY,
            nonce="n-1",
            signature=b"\x01" * 64,
            formats=[1, 2],
            takeover=True,
        ),
    ),
    _frame("Challenge", Challenge(v=2, nonce="n-1")),
    _frame("Welcome", Welcome(v=2, session_id=SES, owner_epoch=3, hub_boot_id=BOOT, floor_seq=6)),
    _frame("Refused", Refused(v=2, reason="stale_epoch", detail="epoch 2 is not current")),
    _frame("HubBoot", HubBoot(v=2, boot_id=BOOT)),
    _frame("Ping", Ping(v=2, session_id=SES)),
    _frame("Pong", Pong(v=2, deployment_id=DEP)),
    _frame(
        "MailInbound",
        MailInbound(
            v=2,
            dispatch_id=DSP,
            deployment_id=DEP,
            run_id=RUN,
            address=ADDRESS,
            seq=7,
            kind="mail",
            message_id="m-1",
            sender="a@example.org",
            subject="hello",
            body=b"hello",
            start_request_id=None,
            owner_epoch=3,
            session_id=SES,
        ),
    ),
    _frame(
        "MailInbound.claim",
        MailInbound(
            v=2,
            dispatch_id=DSP,
            deployment_id=DEP,
            run_id=RUN,
            address=ADDRESS,
            seq=8,
            claim=Claim(digest="sha256:" + "ab" * 32, size=70_000),
            owner_epoch=3,
            session_id=SES,
        ),
    ),
    Golden(
        "v2/Ack.msgpack",
        "frame",
        Ack(v=2, dispatch_id=DSP, result="stored"),
        lambda: encode(AckBeforeDetail(dispatch_id=DSP, result="stored")),
    ),
    _frame(
        "Ack.detail",
        Ack(
            v=2,
            dispatch_id=DSP,
            result="refused",
            reason="digest_mismatch",
            detail=f"blob sha256:{'ab' * 32}: got 3 bytes",
        ),
    ),
    _frame(
        "BlobGet",
        BlobGet(
            v=2, digest="sha256:" + "ab" * 32, offset=524_288, deployment_id=DEP, session_id=SES
        ),
    ),
    _frame(
        "BlobChunk",
        BlobChunk(v=2, digest="sha256:" + "ab" * 32, offset=0, size=70_000, data=b"\xff" * 16),
    ),
    _frame(
        "MintChild",
        MintChild(
            v=2,
            parent_run_id=RUN,
            request_id="spawn-1",
            deployment_id=DEP,
            session_id=SES,
            owner_epoch=3,
        ),
    ),
    _frame("Minted", Minted(v=2, run_id=CHILD)),
    # Added within format 2 (defaults keep older files and readers working).
    _whole(
        "Hello.home",
        Hello(
            v=2,
            deployment_id=DEP,
            instance_id=INS,
            public_key=PUBLIC_KEY,
            nonce="n-2",
            signature=b"\x02" * 64,
            formats=[1, 2],
            home="home_" + "4c" * 13,
            previous_instance="ins_" + "5d" * 13,
        ),
    ),
    _whole(
        "Welcome.from_hub",
        Welcome(v=2, session_id=SES, owner_epoch=4, hub_boot_id=BOOT, floor_seq=6, from_hub=True),
        since=("policy",),
    ),
    _frame("Fenced", Fenced(v=2, deployment_id=DEP, owner_epoch=4, reason="owner_conflict")),
    _frame(
        "StateGet",
        StateGet(v=2, deployment_id=DEP, session_id=SES, owner_epoch=4, after_run_id=RUN),
    ),
    _frame(
        "RunStates",
        RunStates(
            v=2,
            runs=[
                RunSnapshot(run_id=RUN, status="running", state=STATE, last_seq=6),
                RunSnapshot(
                    run_id=CHILD, status="completed", last_seq=2, result={"ok": True}, error=None
                ),
            ],
            floor_seq=6,
            more=True,
        ),
    ),
    _frame(
        "RunEvents",
        RunEvents(v=2, deployment_id=DEP, session_id=SES, owner_epoch=3, events=_EVENTS_V2[:2]),
    ),
    Golden(
        "v2/EventsAck.msgpack",
        "frame",
        EventsAck(v=2, ids=[EVT]),
        lambda: encode(EventsAckBeforeFloor(ids=[EVT])),
    ),
    _whole("EventsAck.floor", EventsAck(v=2, ids=[EVT], floor_seq=4)),
    *(_event(e) for e in _EVENTS_V2),
    # Workflow versions (added within format 2).
    _whole(
        "MailInbound.version",
        MailInbound(
            v=2,
            dispatch_id=DSP,
            deployment_id=DEP,
            run_id=RUN,
            address=ADDRESS,
            seq=9,
            body=b"hello",
            owner_epoch=3,
            session_id=SES,
            version=2,
            code=Claim(digest="sha256:" + "cd" * 32, size=120),
        ),
        since=("raw", "context", "trace"),
    ),
    _whole(
        "LoadVersion",
        LoadVersion(
            v=2, session_id=SES, version=2, code=Claim(digest="sha256:" + "cd" * 32, size=120)
        ),
    ),
    _whole("VersionLoaded", VersionLoaded(v=2, deployment_id=DEP, version=2, error="")),
    _whole(
        "IngressBatch",
        IngressBatch(
            v=2,
            mails=[
                msgspec.Raw(msgspec.msgpack.encode(mail))
                for mail in (
                    IngressMail(
                        to=ADDRESS,
                        subject="hello",
                        body="hello",
                        message_id="m-1",
                        sender="a@example.org",
                    ),
                    IngressMail(to=ADDRESS, body_b64="aGVsbG8="),
                    5,  # not a mail: that item's error, not the frame's
                )
            ],
        ),
    ),
    _whole(
        "IngressReceipts",
        IngressReceipts(
            v=2,
            receipts=[
                IngressReceipt(
                    status="accepted",
                    dispatch_id=DSP,
                    run_id=RUN,
                    deployment_id=DEP,
                    seq=7,
                    duplicate=False,
                ),
                IngressReceipt(status="rejected", reason="unknown_address", detail="no such"),
                IngressReceipt(status="error", reason="invalid_mail", detail="not a mail"),
            ],
        ),
    ),
    Golden(
        "v2/DispatchProcessed.version.msgpack",
        "event",
        _PROCESSED_V2,
        lambda: _without(_PROCESSED_V2, "error", "trace"),
    ),
    Golden(
        "v2/MailSent.message_id.msgpack",
        "event",
        _MAIL_SENT,
        lambda: _without(_MAIL_SENT, *_ADDED_IN_FORMAT_2["MailSent"][1:]),
    ),
    # Failure policies (added within format 2).
    _whole(
        "Welcome.policy",
        Welcome(
            v=2,
            session_id=SES,
            owner_epoch=4,
            hub_boot_id=BOOT,
            floor_seq=6,
            policy=FailurePolicy(
                on_failure="park", max_attempts=3, max_backoff=30.0, handler_timeout=60.0
            ),
        ),
        since=("policy.max_concurrent_runs",),
    ),
    _whole(
        "SetPolicy",
        SetPolicy(v=2, session_id=SES, policy=FailurePolicy(on_failure="suspend")),
        since=("policy.max_concurrent_runs",),
    ),
    _whole(
        "SetPolicy.concurrency",
        SetPolicy(v=2, session_id=SES, policy=FailurePolicy(max_concurrent_runs=4)),
    ),
    _whole("PolicySet", PolicySet(v=2, deployment_id=DEP)),
    # Scale to zero (added within format 2).
    _whole("Sleep", Sleep(v=2, deployment_id=DEP, session_id=SES, owner_epoch=3)),
    _whole("Asleep", Asleep(v=2, deployment_id=DEP)),
    Golden(
        "v2/RunSuspended.msgpack",
        "event",
        _SUSPENDED,
        lambda: encode(_SUSPENDED),
    ),
    Golden(
        "v2/DispatchProcessed.parked.msgpack",
        "event",
        _PARKED,
        lambda: _without(_PARKED, "trace"),
    ),
    # Timers, approvals that expire, schedules and steps (added within format 2).
    *(
        Golden(f"v2/{name}.msgpack", "event", event, lambda event=event: encode(event))
        for name, event in _TIME_EVENTS.items()
    ),
    _whole(
        "RunStates.steps",
        RunStates(
            v=2,
            runs=[
                RunSnapshot(
                    run_id=RUN,
                    status="running",
                    state=STATE,
                    last_seq=6,
                    last_step=6,
                    version=1,
                    steps=[_TIME_EVENTS["StepRecorded"], _TIME_EVENTS["StepRecorded.error"]],
                )
            ],
            floor_seq=6,
        ),
    ),
    Golden(
        "v2/inbox_envelope.timer.msgpack",
        "envelope",
        _TIMER_V2,
        lambda: _envelope_before_context(_TIMER_V2),
    ),
    Golden(
        "v2/inbox_envelope.schedule.msgpack",
        "envelope",
        _SCHEDULE_V2,
        lambda: _envelope_before_context(_SCHEDULE_V2),
    ),
    # Mail that behaves like mail (added within format 2): a mail's context
    # (tag, thread, sender checks), rich outbound mail, and bounces.
    _whole("MailInbound.context", _MAIL_WITH_CONTEXT, since=("trace",)),
    Golden("v2/MailSent.rich.msgpack", "event", _RICH_MAIL, lambda: _without(_RICH_MAIL, "trace")),
    # Trace contexts (added within format 2): W3C headers, empty when not tracing.
    _whole("MailInbound.trace", msgspec.structs.replace(_MAIL_WITH_CONTEXT, trace=_TRACE)),
    *(
        Golden(f"v2/{type(e).__name__}.trace.msgpack", "event", e, lambda e=e: encode(e))
        for e in _TRACED_EVENTS
    ),
    Golden(
        "v2/inbox_envelope.context.msgpack",
        "envelope",
        _CONTEXT_V2,
        lambda: encode_envelope(_CONTEXT_V2),
    ),
    Golden(
        "v2/inbox_envelope.bounce.msgpack",
        "envelope",
        _BOUNCE_V2,
        lambda: encode_envelope(_BOUNCE_V2),
    ),
    Golden(
        "v2/restore_record.json",
        "restore_record",
        (_RECORD_V2, 2),
        # Written before ``nats_seed`` was added (it decodes as None).
        lambda: _record_json(_RECORD_V2, drop=("nats_seed",)),
    ),
    Golden(
        "v2/restore_record.nats_seed.json",
        "restore_record",
        (_RECORD_V2_NATS, 2),
        lambda: _record_json(_RECORD_V2_NATS),
    ),
    Golden(
        "v2/inbox_envelope.msgpack",
        "envelope",
        _ENVELOPE_V2,
        lambda: msgspec.msgpack.encode(
            _strip(msgspec.msgpack.decode(encode_envelope(_ENVELOPE_V2)), "Envelope")
        ),
    ),
    Golden("v2/run_state.msgpack", "run_state", STATE, lambda: encode_run_state(STATE)),
    # Failure policies and cancels (added within format 2): the items a run
    # is resumed and cancelled by, and the policy the inbox keeps (meta).
    Golden(
        "v2/inbox_envelope.resume.msgpack",
        "envelope",
        _RESUME_V2,
        lambda: _envelope_before_context(_RESUME_V2),
    ),
    Golden(
        "v2/inbox_envelope.cancel.msgpack",
        "envelope",
        _CANCEL_V2,
        lambda: _envelope_before_context(_CANCEL_V2),
    ),
    Golden(
        "v2/policy_meta.json",
        "policy_meta",
        _POLICY,
        lambda: msgspec.json.encode(_POLICY),
    ),
]

# Release 1, as docs/design.md section 6 fixes it: plain maps, written as release 1 did.
_V1_ENVELOPE = {
    "v": 1,
    "dispatch_id": DSP,
    "deployment_id": DEP,
    "address": ADDRESS,
    "kind": "mail",
    "message_id": "m-1",
    "sender": "a@example.org",
    "subject": "hello",
    "body": b"hello",
}
_V1_RECORD = {
    "deployment": {
        "deployment_id": DEP,
        "address": ADDRESS,
        "session_id": SES,
        "deployment_key": SEED,
        "sources": SOURCES,
        "nats_url": "nats://127.0.0.1:4222",
    }
}
_V1_MAIL = {
    "t": "MailInbound",
    "v": 1,
    "dispatch_id": DSP,
    "deployment_id": DEP,
    "address": ADDRESS,
    "kind": "mail",
    "message_id": "m-1",
    "sender": "a@example.org",
    "subject": "hello",
    "body": b"hello",
    "start_request_id": None,
    "owner_epoch": 3,
}

V1 = [
    Golden(
        "v1/inbox_envelope.msgpack",
        "envelope",
        Envelope(
            v=1,
            dispatch_id=DSP,
            deployment_id=DEP,
            address=ADDRESS,
            kind="mail",
            message_id="m-1",
            sender="a@example.org",
            subject="hello",
            body=b"hello",
        ),
        lambda: msgspec.msgpack.encode(_V1_ENVELOPE),
    ),
    Golden(
        "v1/restore_record.json",
        "restore_record",
        (
            RestoreRecord(
                version=RECORD_VERSION,
                deployment_id=DEP,
                address=ADDRESS,
                session_id=SES,
                hub_key=HubKey(seed=SEED),
                sources=Sources(entrypoint="flow:main", files=FILES),
                nats_url="nats://127.0.0.1:4222",
            ),
            1,
        ),
        lambda: json.dumps(_V1_RECORD).encode(),
    ),
    Golden(
        "v1/MailInbound.msgpack",
        "frame",
        MailInbound(
            v=1,
            dispatch_id=DSP,
            deployment_id=DEP,
            address=ADDRESS,
            kind="mail",
            message_id="m-1",
            sender="a@example.org",
            subject="hello",
            body=b"hello",
            owner_epoch=3,
        ),
        lambda: msgspec.msgpack.encode(_V1_MAIL),
    ),
]


_ADDED_IN_FORMAT_3 = {"MailInbound": ("raw", "context", "trace")}
"""Fields added to a format 3 frame's parts after its golden file was written."""


def _v3(name: str, value: msgspec.Struct) -> Golden:
    def first_written() -> bytes:
        data = msgspec.msgpack.decode(encode(value))
        for item in data.get("items") or ():  # MailBatch
            for field in _ADDED_IN_FORMAT_3["MailInbound"]:
                item.pop(field, None)
        return msgspec.msgpack.encode(data)

    return Golden(f"v3/{name}.msgpack", "frame", value, first_written)


_MAIL_V2 = MailInbound(
    v=2,
    dispatch_id=DSP,
    deployment_id=DEP,
    run_id=RUN,
    address=ADDRESS,
    seq=7,
    message_id="m-1",
    sender="a@example.org",
    subject="hello",
    body=b"hello",
    owner_epoch=3,
    session_id=SES,
    version=1,
)

V3 = [
    _v3(
        "MailBatch",
        MailBatch(
            v=3,
            items=[
                _MAIL_V2,
                msgspec.structs.replace(
                    _MAIL_V2,
                    dispatch_id=DSP[:-1] + "9",
                    seq=8,
                    body=None,
                    claim=Claim(digest="sha256:" + "cd" * 32, size=70_000),
                ),
            ],
        ),
    ),
    _v3(
        "Hello",
        Hello(
            v=2,
            deployment_id=DEP,
            instance_id=INS,
            public_key=PUBLIC_KEY,
            nonce="n-3",
            signature=b"\x03" * 64,
            formats=[1, 2, 3],
            home="home_" + "4c" * 13,
        ),
    ),
    _v3(
        "AckBatch",
        AckBatch(
            v=3,
            acks=[
                Ack(v=2, dispatch_id=DSP, result="stored"),
                Ack(
                    v=2,
                    dispatch_id=DSP[:-1] + "9",
                    result="refused",
                    reason="blob_unavailable",
                    detail="no such blob",
                ),
            ],
        ),
    ),
]

GOLDEN = [*V1, *V2, *V3]


def golden_bytes(kind: str) -> list[bytes]:
    """The bytes of every golden file of ``kind`` ("frame", "envelope", ...):
    real input of every release, which the fuzz tests mutate."""
    return [g.file.read_bytes() for g in GOLDEN if g.kind == kind]
