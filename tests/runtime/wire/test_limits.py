"""The size limits add up: whatever they allow fits one NATS message."""

from __future__ import annotations

from runtime import (
    MAX_FRAME_BYTES,
    WIRE_MAX_PAYLOAD,
    RunEvents,
    RunSnapshot,
    RunStates,
    encode,
    new_id,
)
from runtime.wire import (
    MAX_ERROR,
    MAX_EVENT,
    MAX_INPUT,
    MAX_MAIL,
    MAX_PROMPT,
    MAX_RESULT,
    MAX_STATE,
    SIZE_LIMITS,
    clip_text,
    encoded_size,
)


def a_string(size: int) -> str:
    """A str whose msgpack encoding is exactly ``size`` bytes (a str32 header is 5)."""
    return "x" * (size - 5)


def test_every_limit_has_a_name_and_each_value_is_under_the_event_limit() -> None:
    assert len({limit.name for limit in SIZE_LIMITS}) == len(SIZE_LIMITS)
    for limit in (MAX_STATE, MAX_RESULT, MAX_INPUT, MAX_MAIL, MAX_PROMPT, MAX_ERROR):
        # The rest of the event (ids, address, tags) fits in what is left.
        assert limit.bytes <= MAX_EVENT.bytes - 64 * 1024


def test_a_frame_of_one_event_at_the_limit_fits_one_message() -> None:
    frame = RunEvents(
        deployment_id=new_id("dep"), session_id=new_id("ses"), owner_epoch=2**31, events=[]
    )
    assert len(encode(frame)) + 5 + MAX_EVENT.bytes <= MAX_FRAME_BYTES <= WIRE_MAX_PAYLOAD


def test_the_hubs_snapshot_of_a_run_at_every_limit_fits_one_page() -> None:
    snapshot = RunSnapshot(
        run_id=new_id("run"),
        status="failed",
        state={"s": a_string(MAX_STATE.bytes - 3)},  # map header 1, key 2
        last_seq=2**62,
        result=a_string(MAX_RESULT.bytes),
        error=clip_text("e" * 10 * MAX_ERROR.bytes),
    )
    assert encoded_size(snapshot.state) == MAX_STATE.bytes
    page = RunStates(runs=[snapshot], floor_seq=2**62, more=True)
    assert len(encode(page)) <= MAX_FRAME_BYTES


def test_clip_text_keeps_short_text_and_cuts_long_text_on_a_character() -> None:
    assert clip_text("short") == "short"
    long = "é" * MAX_ERROR.bytes  # 2 bytes each
    cut = clip_text(long)
    assert len(cut.encode()) <= MAX_ERROR.bytes
    head, _, note = cut.rpartition(" ... ")
    assert set(head) == {"é"}
    assert note == f"[{2 * MAX_ERROR.bytes - len(head.encode())} bytes cut]"
