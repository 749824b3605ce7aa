"""Events encoded once: as a step makes them, the outbox keeps them and the
shipper sends them.

An event is encoded (msgpack, the wire's form) when it is made; its size is
checked on those bytes, the outbox stores them, and the shipper puts them
in a RunEvents frame as they are (``msgspec.Raw``). A DispatchProcessed
carries the run's state, which a step has encoded already (as the inbox's
``run_state`` keeps it): :func:`processed` writes those bytes in as they
are, so a state is encoded once per item whatever reads it after.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from runtime import DispatchProcessed, EnvelopeQuarantined, Event, encode


class Outgoing(NamedTuple):
    """One event as the outbox keeps it."""

    event_id: str
    run_id: str
    kind: str  # the event's type (its tag)
    frame: bytes  # the event, encoded


def outgoing(event: Event) -> Outgoing:
    return Outgoing(event.event_id, event.run_id, type(event).__name__, encode(event))


class _Processed(msgspec.Struct, tag="DispatchProcessed", tag_field="t", kw_only=True):
    """``runtime.DispatchProcessed`` as it is encoded, its state already
    encoded: the same fields in the same order (tests/sidecar/test_events.py
    holds the two to the same bytes)."""

    event_id: str
    run_id: str
    at: float
    dispatch_id: str
    seq: int | None
    state: msgspec.Raw
    outcome: str
    step: int
    version: int
    error: str


def processed(
    *,
    event_id: str,
    run_id: str,
    at: float,
    dispatch_id: str,
    seq: int | None,
    state: bytes,
    outcome: str,
    step: int,
    version: int,
    error: str = "",
) -> Outgoing:
    """A DispatchProcessed whose ``state`` is the run's state encoded (a
    msgpack map, as the inbox keeps it); ``error``: why a ``failed`` or
    ``parked`` one was not processed."""
    event = _Processed(
        event_id=event_id,
        run_id=run_id,
        at=at,
        dispatch_id=dispatch_id,
        seq=seq,
        state=msgspec.Raw(state),
        outcome=outcome,
        step=step,
        version=version,
        error=error,
    )
    return Outgoing(event_id, run_id, DispatchProcessed.__name__, encode(event))


SETTLING = frozenset({DispatchProcessed.__name__, EnvelopeQuarantined.__name__})
"""The kinds of event that settle a dispatch, the only ones that name one."""


class _Settles(msgspec.Struct):
    dispatch_id: str


_settles = msgspec.msgpack.Decoder(_Settles)


def settled_dispatch(event: Outgoing) -> str | None:
    """The dispatch ``event`` settles (None: it settles none). Read alone: a
    decoder skips the rest of the event (the state) without building it."""
    if event.kind not in SETTLING:
        return None
    return _settles.decode(event.frame).dispatch_id
