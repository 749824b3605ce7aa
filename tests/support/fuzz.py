"""Hypothesis settings and hostile inputs for the decoders' property tests.

Every decoder that reads bytes from outside the process (frames, restore
records and join tokens, inbox envelopes and run state) must turn any input
into its package's typed error or a valid value. The tests feed each one
arbitrary bytes and near-valid inputs: real frames and records with a field
replaced by a hostile value, dropped, or added, and valid encodings cut
short or with a byte changed.

CI runs the per-test counts given to :func:`fuzz`; ``MAILRUN_FUZZ_EXAMPLES=N``
runs N examples per test instead (the long run, docs/security.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ_EXAMPLES_ENV = "MAILRUN_FUZZ_EXAMPLES"


def fuzz(ci_examples: int) -> settings:
    """Settings for one property test: ``ci_examples`` examples, or the count
    in ``MAILRUN_FUZZ_EXAMPLES``. No deadline (the machine is shared) and no
    example database: a run does not depend on what earlier runs found (a
    failure prints the input and a ``@reproduce_failure`` blob instead)."""
    count = int(os.environ.get(FUZZ_EXAMPLES_ENV) or ci_examples)
    return settings(
        max_examples=count,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# Strategies here draw from prepared lists where they can: hypothesis spends
# far more time building a recursive value than a decoder takes to refuse it,
# and CI runs tens of thousands of examples.

_DEPTHS = (2, 100, 1_000, 20_000)  # the interpreter stops at about 1,000

MSGPACK_HOSTILE: st.SearchStrategy[bytes] = st.sampled_from(
    [
        *(b"\x91" * n + b"\xc0" for n in _DEPTHS),  # arrays nested n deep
        *(b"\x81\xa1k" * n + b"\xc0" for n in _DEPTHS),  # maps nested n deep
        b"\xa2\xff\xfe",  # a str that is not UTF-8
        b"\xa3\xed\xa0\x80",  # a str holding a UTF-16 surrogate
        b"\xcf" + b"\xff" * 8,  # uint64 max
        b"\xd3\x80" + b"\x00" * 7,  # int64 min
        b"\xcb\x7f\xf8" + b"\x00" * 6,  # NaN
        b"\xd4\x05\x00",  # an extension type
        b"\xd6\xff\xff\xff\xff\xff",  # a timestamp
        b"\xc7\x03\xff\x00\x00\x00",  # a timestamp of a length that has none
        b"\xdb\xff\xff\xff\xff",  # a 4 GiB str, cut short
        b"\xdd\xff\xff\xff\xff",  # a 4-billion-element array, cut short
        b"\xdf\xff\xff\xff\xff",  # the same for a map
        b"\xc1",  # the reserved byte
        b"\x82\xa1a\x01\xa1a\x02",  # a map with one key twice
        b"\x81\x91\x01\x01",  # a map whose key is an array
        b"\x81\xc4\x01a\x01",  # a map whose key is bytes
        b"",  # nothing at all
    ]
) | st.binary(max_size=32)
"""msgpack fragments a hostile peer or a damaged disk may put where a value goes."""

_PLAIN = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    0.5,
    float("inf"),
    float("nan"),
    "",
    "x" * 300,
    "é\u2603\U0001f600",
    "\x00\r\n",
    "../../x",
    "dep_" + "0" * 26,
    "run_" + "0" * 26,
    b"",
    b"\x00\xff",
    [],
    [1, "a", None],
    {},
    {"a": {"b": [1, 2, {"c": None}]}},
    {"seen": [{"subject": "hi"}]},
]

_PLAIN_VALUES = st.sampled_from(_PLAIN) | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=12)


def msgpack_values(hostile: bool = True) -> st.SearchStrategy[Any]:
    """A value for one field: a plain one of any type, or a hostile fragment."""
    if not hostile:
        return _PLAIN_VALUES
    return _PLAIN_VALUES | MSGPACK_HOSTILE.map(msgspec.Raw)


JSON_HOSTILE: st.SearchStrategy[bytes] = st.sampled_from(
    [
        *(b"[" * n + b"]" * n for n in _DEPTHS),
        *(b'{"k":' * n + b"null" + b"}" * n for n in _DEPTHS),
        b"9" * 20,  # past uint64
        b"9" * 5000,  # past Python's int-from-text limit
        b"1e999999",
        b"-0",
        b"NaN",
        b'"\xff\xfe"',  # not UTF-8
        b'"\\ud800"',  # a lone surrogate
        b'"\\u0000"',
        b"",
        b"[",
        b'{"a":1,"a":2}',
    ]
) | st.binary(max_size=32)
"""JSON fragments where a restore record's (or a join token's) value goes."""


def json_values() -> st.SearchStrategy[Any]:
    plain = [v for v in _PLAIN if not isinstance(v, bytes | float) or v == 0.5]
    return st.sampled_from(plain) | st.text(max_size=12) | JSON_HOSTILE.map(msgspec.Raw)


# --- mutations -----------------------------------------------------------------


@st.composite
def mutated_map(
    draw: st.DrawFn, base: dict[str, Any], values: st.SearchStrategy[Any]
) -> dict[str, Any]:
    """``base`` (a real record as a map) with up to three fields replaced by a
    drawn value, dropped, or added, at the top level or one level down."""
    out = dict(base)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        target = out
        nested = [k for k, v in out.items() if _inner_map(v) is not None]
        if nested and draw(st.booleans()):
            key = draw(st.sampled_from(nested))
            if isinstance(out[key], list):  # a list of maps (RunEvents.events): its first
                out[key] = [dict(out[key][0]), *out[key][1:]]
                target = out[key][0]
            else:
                target = out[key] = dict(out[key])
        keys = sorted(target)
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "add" or not keys:
            target[draw(st.text(max_size=12))] = draw(values)
        elif action == "drop":
            del target[draw(st.sampled_from(keys))]
        else:
            target[draw(st.sampled_from(keys))] = draw(values)
    return out


def _inner_map(value: Any) -> dict[str, Any] | None:
    if isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, dict) and value else None


@st.composite
def damaged(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding cut short, with bytes changed, or with bytes appended."""
    data = draw(valid)
    how = draw(st.sampled_from(["cut", "flip", "append"]))
    if how == "cut":
        return data[: draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))]
    if how == "append":
        return data + draw(st.binary(min_size=1, max_size=16))
    out = bytearray(data)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if out:
            out[draw(st.integers(min_value=0, max_value=len(out) - 1))] = draw(
                st.integers(min_value=0, max_value=255)
            )
    return bytes(out)


def outcome(decode: Callable[[bytes], Any], data: bytes, error: type[Exception]) -> Any:
    """``decode(data)``: its value, or None when it raised ``error``; any other
    exception fails the test (hypothesis then shrinks the input)."""
    try:
        return decode(data)
    except error:
        return None
