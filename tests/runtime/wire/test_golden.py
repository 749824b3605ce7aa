"""Golden files: the bytes every format version wrote still decode, with the
production decoders, into the values they were written from."""

from __future__ import annotations

from typing import Any, get_args

import msgspec
import pytest

from runtime import Ack, Event, EventsAck, FrameDecoder, MailInbound
from runtime.sidecar_contract import decode_restore_record
from runtime.wire import FORMAT_VERSION, FailurePolicy, Frame
from sidecar.storage import decode_envelope, decode_run_state
from tests.golden.samples import GOLDEN, ROOT, AckBeforeDetail, EventsAckBeforeFloor, Golden

_frames: FrameDecoder[Any] = FrameDecoder()
_events: FrameDecoder[Any] = FrameDecoder(Event)

DECODERS = {
    "frame": _frames.decode,
    "event": _events.decode,
    "restore_record": decode_restore_record,
    "envelope": decode_envelope,
    "run_state": decode_run_state,
    # The failure policy a sidecar keeps in its inbox's meta, as JSON.
    "policy_meta": msgspec.json.Decoder(FailurePolicy).decode,
}


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.path for g in GOLDEN])
def test_each_golden_file_decodes_to_its_value(golden: Golden) -> None:
    decoded = DECODERS[golden.kind](golden.file.read_bytes())
    assert decoded == golden.expected


def test_every_golden_file_is_checked_and_every_check_has_its_file() -> None:
    on_disk = {str(p.relative_to(ROOT)) for p in ROOT.glob("v*/*") if p.is_file()}
    assert on_disk == {g.path for g in GOLDEN}


def _writes(kind: type) -> int:
    """The format version this release writes ``kind`` in."""
    for field in msgspec.structs.fields(kind):
        if field.name == "v":
            return int(field.default)
    return FORMAT_VERSION  # events carry no version of their own: their frame's


def test_every_frame_and_event_type_of_this_release_has_a_golden_file() -> None:
    covered = {(type(g.expected), g.path.split("/")[0]) for g in GOLDEN}
    missing = {
        t.__name__
        for t in (*get_args(Frame), *get_args(Event))
        if (t, f"v{_writes(t)}") not in covered
    }
    assert not missing, f"add golden samples for {sorted(missing)} (tests/golden/samples.py)"


def test_release_1_records_name_their_run_by_address() -> None:
    envelope = decode_envelope((ROOT / "v1/inbox_envelope.msgpack").read_bytes())
    assert (envelope.run_id, envelope.seq) == (None, None)
    assert envelope.effective_run_id == envelope.address
    frame = _frames.decode((ROOT / "v1/MailInbound.msgpack").read_bytes())
    assert isinstance(frame, MailInbound)
    assert (frame.run_id, frame.seq, frame.effective_run_id) == (None, None, frame.address)


def test_ack_detail_was_added_within_format_2_both_ways() -> None:
    # v2/Ack.msgpack predates ``detail``: it decodes with an empty one.
    before = _frames.decode((ROOT / "v2/Ack.msgpack").read_bytes())
    assert isinstance(before, Ack) and before.detail == ""
    # An Ack with detail is read by a reader that predates it, detail ignored.
    after = (ROOT / "v2/Ack.detail.msgpack").read_bytes()
    old = msgspec.msgpack.Decoder(AckBeforeDetail).decode(after)
    assert (old.v, old.result, old.reason) == (2, "refused", "digest_mismatch")


def test_events_ack_floor_was_added_within_format_2_both_ways() -> None:
    before = _frames.decode((ROOT / "v2/EventsAck.msgpack").read_bytes())
    assert isinstance(before, EventsAck) and before.floor_seq == 0  # no claim
    after = (ROOT / "v2/EventsAck.floor.msgpack").read_bytes()
    old = msgspec.msgpack.Decoder(EventsAckBeforeFloor).decode(after)
    assert (old.v, len(old.ids)) == (2, 1)
