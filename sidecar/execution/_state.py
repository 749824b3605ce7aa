"""A run's state as a step commits it: a JSON-able dict within its limit,
encoded once.

The handler's ``ctx.state`` is checked when its call returns: a dict,
JSON-able (``msgspec.json``), at most ``MAX_STATE`` encoded. What is kept
is the state as JSON holds it (tuples become lists, bytes base64 text...):
what a handler ever gets back, here or after a restart. It is encoded once,
as msgpack, the form the inbox stores (``run_state``) and DispatchProcessed
carries: those bytes go to the commit and into the event as they are, and
the decoded dict goes to the next handler call of the batch without
another decoding.
"""

from __future__ import annotations

from typing import Any

import msgspec

from runtime.wire import MAX_STATE

from .._errors import LimitExceeded, StateNotSerializable
from ..storage import encode_run_state
from ._context import to_json

_decode = msgspec.msgpack.Decoder(dict[str, Any])


class Snapshot:
    """A run's state, encoded (:attr:`data`); and, until a handler call takes
    it, the dict those bytes decode to."""

    __slots__ = ("_fresh", "data")

    def __init__(self, data: bytes, fresh: dict[str, Any] | None = None) -> None:
        self.data = data
        self._fresh = fresh

    def take(self) -> dict[str, Any]:
        """The state as a dict of the caller's own, which it may change."""
        fresh, self._fresh = self._fresh, None
        return fresh if fresh is not None else _decode.decode(self.data)


def snapshot_of(state: dict[str, Any], what: str) -> Snapshot:
    """``state`` as JSON holds it, encoded; :class:`StateNotSerializable`
    (naming it ``what``) if it is not JSON-able."""
    normal: dict[str, Any] = msgspec.json.decode(to_json(state, what))
    return Snapshot(encode_run_state(normal), normal)


def state_snapshot(state: object) -> Snapshot:
    """``ctx.state`` as a run commits it: a JSON-able dict within its limit;
    else :class:`StateNotSerializable` or :class:`LimitExceeded`."""
    if not isinstance(state, dict):
        raise StateNotSerializable(f"ctx.state must be a dict, not {type(state).__name__}")
    snapshot = snapshot_of(state, "ctx.state")
    if len(snapshot.data) > MAX_STATE.bytes:
        raise LimitExceeded("ctx.state", len(snapshot.data), MAX_STATE)
    return snapshot
