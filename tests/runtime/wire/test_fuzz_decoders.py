"""Property tests: runtime's decoders turn any input into their typed error or a
valid value, never another exception (tests/support/fuzz.py has the inputs)."""

from __future__ import annotations

import typing

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime import (
    Ack,
    DispatchProcessed,
    Event,
    FrameDecodeError,
    FrameDecoder,
    RecordDecodeError,
    Refused,
    RestoreRecord,
    RunEvents,
    Welcome,
    encode,
    is_id,
)
from runtime.sidecar_contract import decode_restore_record
from runtime.wire import Frame
from tests.golden.samples import golden_bytes
from tests.support.fuzz import (
    damaged,
    fuzz,
    json_values,
    msgpack_values,
    mutated_map,
    outcome,
)

# slow: thousands of generated inputs per test
pytestmark = [pytest.mark.fuzz, pytest.mark.slow]


# Real bytes of every frame type and format (tests/golden), and every event
# inside a RunEvents frame: what mutations start from.
FRAMES = golden_bytes("frame") + [
    msgspec.msgpack.encode(
        {
            "t": "RunEvents",
            "session_id": "s",
            "owner_epoch": 1,
            "events": [msgspec.msgpack.decode(e)],
        }
    )
    for e in golden_bytes("event")
]
FRAME_TYPES = typing.get_args(Frame)


@st.composite
def near_valid_frames(draw: st.DrawFn) -> bytes:
    base = msgspec.msgpack.decode(draw(st.sampled_from(FRAMES)))
    return msgspec.msgpack.encode(draw(mutated_map(base, msgpack_values())))


# Decoders as the code keeps them: any frame, and the typed ones a caller
# waiting for one answer uses.
DECODERS = [FrameDecoder(), FrameDecoder(Ack | Refused), FrameDecoder(Welcome | Refused)]


def check_frames(data: bytes) -> None:
    for decoder in DECODERS:
        frame = outcome(decoder.decode, data, FrameDecodeError)
        if frame is not None:
            assert isinstance(frame, FRAME_TYPES)
            again = encode(frame)  # a usable frame: it encodes, and reads back the same
            assert encode(FrameDecoder().decode(again)) == again


@fuzz(1750)
@given(st.binary(max_size=512))
def test_frames_from_arbitrary_bytes(data: bytes) -> None:
    check_frames(data)


@fuzz(1000)
@given(near_valid_frames())
def test_frames_with_fields_replaced_dropped_or_added(data: bytes) -> None:
    check_frames(data)


@fuzz(750)
@given(damaged(st.sampled_from(FRAMES)))
def test_frames_cut_short_or_changed(data: bytes) -> None:
    check_frames(data)


def test_the_samples_cover_every_frame_and_event_type() -> None:
    decoded = [FrameDecoder().decode(f) for f in FRAMES]
    assert {type(f) for f in decoded} == set(FRAME_TYPES)
    events = {type(e) for f in decoded if isinstance(f, RunEvents) for e in f.events}
    assert events == set(typing.get_args(Event))


def test_deep_nesting_in_a_free_form_field_is_a_frame_decode_error() -> None:
    # Before the fix: RecursionError out of the decoder, into the caller's loop.
    deep = msgspec.Raw(b"\x91" * 200_000 + b"\xc0")
    event = msgspec.to_builtins(DispatchProcessed(event_id="e", run_id="r", dispatch_id="d"))
    frame = {"t": "RunEvents", "session_id": "s", "owner_epoch": 1}
    data = msgspec.msgpack.encode({**frame, "events": [{**event, "state": {"k": deep}}]})
    with pytest.raises(FrameDecodeError, match="nested too deeply"):
        FrameDecoder().decode(data)


# --- restore records -----------------------------------------------------------


RECORDS = golden_bytes("restore_record")


@st.composite
def near_valid_records(draw: st.DrawFn) -> bytes:
    base = msgspec.json.decode(draw(st.sampled_from(RECORDS)))
    return msgspec.json.encode(draw(mutated_map(base, json_values())))


def check_record(data: bytes) -> None:
    decoded = outcome(decode_restore_record, data, RecordDecodeError)
    if decoded is not None:
        record, version = decoded
        assert version in (1, 2)
        assert isinstance(record, RestoreRecord)
        assert is_id(record.deployment_id, "dep")  # it names a directory
        msgspec.json.encode(record)


@fuzz(1000)
@given(st.binary(max_size=512))
def test_restore_records_from_arbitrary_bytes(data: bytes) -> None:
    check_record(data)


@fuzz(600)
@given(near_valid_records())
def test_restore_records_with_fields_replaced_dropped_or_added(data: bytes) -> None:
    check_record(data)


@fuzz(500)
@given(damaged(st.sampled_from(RECORDS)))
def test_restore_records_cut_short_or_changed(data: bytes) -> None:
    check_record(data)


@pytest.mark.parametrize("bad", ["../../x", "dep_../../x", "/etc", "", "run_" + "0" * 26])
def test_a_record_whose_deployment_id_is_not_an_id_is_refused(bad: str) -> None:
    data = msgspec.json.encode({**msgspec.json.decode(RECORDS[-1]), "deployment_id": bad})
    with pytest.raises(RecordDecodeError, match="not a deployment id"):
        decode_restore_record(data)
