"""Property tests: the sidecar's decoders (inbox envelopes, run state, join
tokens) turn any input into their typed error or a valid value, never another
exception (tests/support/fuzz.py has the inputs)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime import RecordDecodeError, RestoreRecord, is_id, record_path
from runtime.wire import b64url
from sidecar._errors import JoinTokenError
from sidecar._record import join, read_join_token
from sidecar.execution import item_of
from sidecar.storage import Envelope, decode_envelope, decode_run_state, encode_envelope
from sidecar.storage._envelope import salvage_run_id
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


ENVELOPES = golden_bytes("envelope")  # release 1's and this release's
STATES = golden_bytes("run_state")
RECORDS = golden_bytes("restore_record")


# --- inbox envelopes -----------------------------------------------------------


def check_envelope(data: bytes) -> None:
    envelope = outcome(decode_envelope, data, RecordDecodeError)
    if envelope is not None:
        assert isinstance(envelope, Envelope)
        assert decode_envelope(encode_envelope(envelope)) == envelope
        item_of(envelope)  # what the handler would be given
    # Run for every input, since the inbox calls it on unreadable rows.
    assert isinstance(salvage_run_id(data), str)


@fuzz(1000)
@given(st.binary(max_size=512))
def test_envelopes_from_arbitrary_bytes(data: bytes) -> None:
    check_envelope(data)


@st.composite
def near_valid_envelopes(draw: st.DrawFn) -> bytes:
    base = msgspec.msgpack.decode(draw(st.sampled_from(ENVELOPES)))
    return msgspec.msgpack.encode(draw(mutated_map(base, msgpack_values())))


@fuzz(600)
@given(near_valid_envelopes())
def test_envelopes_with_fields_replaced_dropped_or_added(data: bytes) -> None:
    check_envelope(data)


@fuzz(500)
@given(damaged(st.sampled_from(ENVELOPES)))
def test_envelopes_cut_short_or_changed(data: bytes) -> None:
    check_envelope(data)


# --- run state -----------------------------------------------------------------


def check_state(data: bytes) -> None:
    state = outcome(decode_run_state, data, RecordDecodeError)
    if state is not None:
        assert isinstance(state, dict) and all(isinstance(k, str) for k in state)
        msgspec.json.encode(state)  # JSON-able, as ctx.state must be


@fuzz(750)
@given(st.binary(max_size=512))
def test_run_state_from_arbitrary_bytes(data: bytes) -> None:
    check_state(data)


@st.composite
def near_valid_states(draw: st.DrawFn) -> bytes:
    base = msgspec.msgpack.decode(draw(st.sampled_from(STATES)))
    return msgspec.msgpack.encode(draw(mutated_map(base, msgpack_values())))


@fuzz(500)
@given(near_valid_states() | damaged(st.sampled_from(STATES)))
def test_run_state_near_valid(data: bytes) -> None:
    check_state(data)


@pytest.mark.parametrize(
    "data",
    [
        b"\x81\xa1k" + b"\x91" * 20_000 + b"\xc0",  # nested past the interpreter's stack
        b"\x81\xa1k\xd4\x05\x00",  # an extension type: not JSON-able
        b"\x81\xa1k\x81\x91\x01\x01",  # a map with an array as key: not JSON-able
    ],
)
def test_run_state_that_no_handler_wrote_is_a_record_decode_error(data: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        decode_run_state(data)


# --- join tokens ---------------------------------------------------------------


def check_token(token: str) -> None:
    record = outcome(read_join_token, token, JoinTokenError)
    if record is not None:
        assert isinstance(record, RestoreRecord)
        assert is_id(record.deployment_id, "dep")


@fuzz(750)
@given(st.text(max_size=300) | st.binary(max_size=300).map(b64url))
def test_join_tokens_from_arbitrary_text(token: str) -> None:
    check_token(token)


@st.composite
def near_valid_tokens(draw: st.DrawFn) -> str:
    base = msgspec.json.decode(draw(st.sampled_from(RECORDS)))
    return b64url(msgspec.json.encode(draw(mutated_map(base, json_values()))))


@fuzz(500)
@given(near_valid_tokens() | damaged(st.sampled_from(RECORDS)).map(b64url))
def test_join_tokens_near_valid(token: str) -> None:
    check_token(token)


@pytest.mark.parametrize("bad", ["../../x", "dep_x/../../../y", "/tmp/x", "."])
def test_a_join_token_naming_a_path_is_refused_and_writes_nothing(tmp_path: Path, bad: str) -> None:
    record = msgspec.json.decode(RECORDS[-1])
    token = b64url(msgspec.json.encode({**record, "deployment_id": bad}))
    state = tmp_path / "a" / "b" / "state"
    with pytest.raises(JoinTokenError, match="not a deployment id"):
        join(state, token)
    assert list(tmp_path.rglob("*")) == []


def test_a_valid_join_token_writes_its_record_in_the_state_dir(tmp_path: Path) -> None:
    record = read_join_token(b64url(RECORDS[-1]))
    join(tmp_path, b64url(RECORDS[-1]))
    assert record_path(tmp_path, record.deployment_id).is_file()
