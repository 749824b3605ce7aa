"""Every frame and event round-trips through the one codec; bad input is typed."""

from __future__ import annotations

import msgspec
import pytest

from runtime import (
    Ack,
    AckBatch,
    AckResult,
    ApprovalRequested,
    Asleep,
    BlobChunk,
    BlobGet,
    Challenge,
    ChildRunStarted,
    Claim,
    DispatchProcessed,
    EventsAck,
    Fenced,
    FrameDecodeError,
    FrameDecoder,
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
    Reason,
    Refused,
    RunCancelled,
    RunCompleted,
    RunEvents,
    RunFailed,
    RunSnapshot,
    RunStarted,
    RunStates,
    Sleep,
    StateGet,
    Subjects,
    VersionLoaded,
    Welcome,
    encode,
    new_id,
)
from runtime.wire import (
    FailurePolicy,
    Frame,
    IngressBatch,
    IngressMail,
    IngressReceipt,
    IngressReceipts,
    PolicySet,
    RunSuspended,
    SetPolicy,
)
from tests.golden.samples import AckBeforeDetail

EVENTS = [
    RunStarted(event_id=new_id("evt"), run_id="run_x", at=1.5),
    DispatchProcessed(
        event_id=new_id("evt"), run_id="run_x", dispatch_id="dsp_1", seq=7, state={"n": [1, 2]}
    ),
    RunCompleted(event_id=new_id("evt"), run_id="run_x", result={"seen": 4}),
    RunFailed(event_id=new_id("evt"), run_id="run_x", error="boom"),
    RunCancelled(event_id=new_id("evt"), run_id="run_x", reason="deleted"),
    ChildRunStarted(event_id=new_id("evt"), run_id="run_x", child_run_id="run_y", input=[1]),
    MailSent(event_id=new_id("evt"), run_id="run_x", to="a@b", subject="s", body=b"\x00\xff"),
    ApprovalRequested(event_id=new_id("evt"), run_id="run_x", approval_id="apr_1", prompt="ok?"),
    RunSuspended(
        event_id=new_id("evt"), run_id="run_x", dispatch_id="dsp_1", attempts=5, error="boom"
    ),
]

FRAMES: list[msgspec.Struct] = [
    Hello(deployment_id="dep_1", instance_id="ins_1", public_key="pk"),
    Hello(
        deployment_id="dep_1",
        instance_id="ins_1",
        public_key="pk",
        nonce="n",
        signature=b"\x01" * 64,
        takeover=True,
    ),
    Challenge(nonce="abc"),
    Welcome(session_id="ses_1", owner_epoch=3, hub_boot_id="boot_1"),
    Refused(reason="owner_conflict", detail="held by ins_2"),
    HubBoot(boot_id="boot_1"),
    Ping(session_id="ses_1"),
    Pong(deployment_id="dep_1"),
    LoadVersion(session_id="ses_1", version=2, code=Claim(digest="sha256:" + "0" * 64, size=10)),
    VersionLoaded(deployment_id="dep_1", version=2, error="SyntaxError: invalid syntax"),
    SetPolicy(session_id="ses_1", policy=FailurePolicy(on_failure="park", max_attempts=2)),
    PolicySet(deployment_id="dep_1"),
    Sleep(deployment_id="dep_1", session_id="ses_1", owner_epoch=2),
    Asleep(deployment_id="dep_1"),
    Welcome(
        session_id="ses_1",
        owner_epoch=3,
        hub_boot_id="boot_1",
        policy=FailurePolicy(handler_timeout=1.5),
    ),
    MailInbound(
        dispatch_id="dsp_1",
        deployment_id="dep_1",
        run_id="run_1",
        address="a@mailrun.local",
        seq=1,
        message_id="m1",
        sender="s@x",
        subject="hi",
        body=b"hello",
        owner_epoch=2,
        session_id="ses_1",
    ),
    MailInbound(
        dispatch_id="dsp_2",
        deployment_id="dep_1",
        run_id="run_1",
        address="a@mailrun.local",
        seq=2,
        claim=Claim(digest="sha256:00", size=5 << 20),
    ),
    Ack(dispatch_id="dsp_1", result="stored"),
    Ack(dispatch_id="", result="refused", reason="decode_error"),
    Ack(dispatch_id="dsp_1", result="refused", reason="digest_mismatch", detail="3 bytes short"),
    MailBatch(items=[MailInbound(dispatch_id="dsp_1", deployment_id="dep_1", address="a@x")]),
    MailBatch(items=[]),
    AckBatch(acks=[Ack(dispatch_id="dsp_1", result="stored")]),
    BlobGet(digest="sha256:00", offset=512, deployment_id="dep_1", session_id="ses_1"),
    BlobChunk(digest="sha256:00", offset=0, size=3, data=b"abc"),
    MintChild(parent_run_id="run_1", request_id="r1", deployment_id="dep_1", owner_epoch=1),
    Minted(run_id="run_2"),
    Fenced(deployment_id="dep_1", owner_epoch=2, reason="owner_conflict"),
    StateGet(deployment_id="dep_1", session_id="ses_1", owner_epoch=2, after_run_id="run_1"),
    RunStates(
        runs=[RunSnapshot(run_id="run_1", status="running", state={"n": 3}, last_seq=4)],
        floor_seq=4,
        more=False,
    ),
    RunEvents(deployment_id="dep_1", session_id="ses_1", owner_epoch=1, events=list(EVENTS)),
    EventsAck(ids=["evt_1", "evt_2"]),
    IngressBatch(
        mails=[
            msgspec.Raw(msgspec.msgpack.encode(IngressMail(to="a@x", subject="s", body="b"))),
            msgspec.Raw(msgspec.msgpack.encode({"subject": "no recipient"})),
        ]
    ),
    IngressReceipts(
        receipts=[
            IngressReceipt(
                status="accepted",
                dispatch_id="dsp_1",
                run_id="run_1",
                deployment_id="dep_1",
                seq=1,
                duplicate=False,
            ),
            IngressReceipt(status="error", reason="invalid_mail", detail="no 'to'"),
        ]
    ),
]


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: type(f).__name__)
def test_every_frame_round_trips(frame: msgspec.Struct) -> None:
    decoded = FrameDecoder().decode(encode(frame))
    assert decoded == frame
    assert type(decoded) is type(frame)


def test_every_frame_type_is_covered() -> None:
    covered = {type(f) for f in FRAMES}
    assert covered == set(Frame.__args__)  # type: ignore[attr-defined]


def test_unknown_fields_are_ignored_and_missing_ones_defaulted() -> None:
    raw = msgspec.msgpack.encode(
        {"t": "Ack", "v": 9, "dispatch_id": "dsp_1", "result": "stored", "future": [1, 2]}
    )
    ack = FrameDecoder(Ack).decode(raw)
    assert ack == Ack(v=9, dispatch_id="dsp_1", result="stored", reason="")


def test_an_ack_with_detail_and_one_without_read_each_other() -> None:
    # A sidecar of an older release wrote no detail (and its prose into reason).
    older = msgspec.msgpack.encode(
        {"t": "Ack", "v": 2, "dispatch_id": "dsp_1", "result": "refused", "reason": "x: y"}
    )
    assert FrameDecoder(Ack).decode(older) == Ack(
        v=2, dispatch_id="dsp_1", result=AckResult.REFUSED, reason="x: y", detail=""
    )
    # A hub of an older release reads an Ack with detail, ignoring it.
    newer = Ack(
        dispatch_id="dsp_1", result="refused", reason=Reason.DIGEST_MISMATCH, detail="short"
    )
    read = msgspec.msgpack.Decoder(AckBeforeDetail).decode(encode(newer))
    assert (read.dispatch_id, read.result, read.reason) == ("dsp_1", "refused", "digest_mismatch")


def test_a_code_this_release_does_not_know_still_decodes() -> None:
    # A peer of a later release may send a reason or an outcome this one lacks.
    frames = FrameDecoder(Ack | Refused | RunEvents)
    refused = msgspec.msgpack.encode({"t": "Refused", "reason": "from_the_future"})
    assert frames.decode(refused) == Refused(reason="from_the_future")
    ack = {"t": "Ack", "dispatch_id": "d", "result": "refused", "reason": "from_the_future"}
    assert frames.decode(msgspec.msgpack.encode(ack)).reason == "from_the_future"
    processed = DispatchProcessed(
        event_id="evt_1", run_id="run_1", dispatch_id="dsp_1", outcome="from_the_future"
    )
    events = RunEvents(session_id="ses_1", owner_epoch=1, events=[processed])
    assert frames.decode(encode(events)) == events


def test_codes_equal_their_strings_on_the_wire() -> None:
    ack = Ack(dispatch_id="d", result=AckResult.REFUSED, reason=Reason.STALE_EPOCH)
    assert msgspec.msgpack.decode(encode(ack))["reason"] == "stale_epoch"
    assert FrameDecoder(Ack).decode(encode(ack)) == Ack(
        dispatch_id="d", result="refused", reason="stale_epoch"
    )


def test_format_1_mail_inbound_has_its_address_as_run_id() -> None:
    v1 = {
        "t": "MailInbound",
        "v": 1,
        "dispatch_id": "dsp_1",
        "deployment_id": "dep_1",
        "address": "shop@mailrun.local",
        "kind": "mail",
        "body": b"x",
    }
    frame = FrameDecoder(MailInbound).decode(msgspec.msgpack.encode(v1))
    assert frame.run_id is None and frame.seq is None
    assert frame.effective_run_id == "shop@mailrun.local"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        b"not msgpack at all \xff\xfe",
        msgspec.msgpack.encode({"t": "NoSuchFrame"}),
        msgspec.msgpack.encode({"t": "Ack", "result": "stored"}),  # dispatch_id missing
        msgspec.msgpack.encode({"t": "Ack", "dispatch_id": "d", "result": "maybe"}),
        msgspec.msgpack.encode([1, 2, 3]),
    ],
)
def test_garbage_is_a_typed_error(data: bytes) -> None:
    with pytest.raises(FrameDecodeError) as info:
        FrameDecoder().decode(data)
    assert isinstance(info.value, ValueError)


def test_a_narrow_decoder_refuses_other_frames() -> None:
    with pytest.raises(FrameDecodeError):
        FrameDecoder(Ack | Refused).decode(encode(HubBoot(boot_id="b")))


def test_subjects() -> None:
    s = Subjects("acme")
    assert s.hello == "acme.hub.hello"
    assert s.inbound("dep_1") == "acme.mail.inbound.dep_1"
    assert s.ingress("prd_1") == "acme.ingress.prd_1" and s.ingress() == "acme.ingress.*"
    with pytest.raises(ValueError):
        s.ingress("prd.1")
    for bad in ("", "a b", "x.>", "y.*", "z."):
        with pytest.raises(ValueError):
            Subjects(bad)
