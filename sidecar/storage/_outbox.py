"""The event outbox: events encoded once as a step makes them, committed
with it, read in order by the shipper, and gone once the hub has
acknowledged them.

An event is encoded (msgpack, the wire's form) when it is made; its size is
checked on those bytes, the outbox stores them, and the shipper puts them
in a RunEvents frame as they are (``msgspec.Raw``). A DispatchProcessed
carries the run's state, which a step has encoded already (as the inbox's
``run_state`` keeps it): :func:`processed` writes those bytes in as they
are, so a state is encoded once per item whatever reads it after.

An acknowledgement is also where retention happens: the envelopes the
acknowledged events settled drop their bodies (:data:`COMPACTED`), and the
done rows the processing position has left far enough behind are deleted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import msgspec

from runtime import DispatchProcessed, EnvelopeQuarantined, Event, encode

from ._position import COMPACTED


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
    trace: dict[str, str]


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
    trace: dict[str, str] | None = None,
) -> Outgoing:
    """A DispatchProcessed whose ``state`` is the run's state encoded (a
    msgpack map, as the inbox keeps it); ``error``: why a ``failed`` or
    ``parked`` one was not processed; ``trace``: the handler call's context."""
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
        trace=trace or {},
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


def add_events(conn: sqlite3.Connection, events: Iterable[Outgoing]) -> None:
    """Append ``events`` to the outbox, in order."""
    conn.executemany(
        "INSERT INTO outbox (event_id, run_id, kind, frame) VALUES (?, ?, ?, ?)", events
    )


def unacked_events(conn: sqlite3.Connection, limit: int, after: int) -> list[tuple[int, Outgoing]]:
    """Events the hub has not acknowledged, after outbox position ``after``,
    in order, with their positions."""
    rows = conn.execute(
        "SELECT pos, event_id, run_id, kind, frame FROM outbox"
        " WHERE acked = 0 AND pos > ? ORDER BY pos LIMIT ?",
        (after, limit),
    )
    return [(int(pos), Outgoing(e, r, k, bytes(f))) for pos, e, r, k, f in rows]


def drop_acknowledged(conn: sqlite3.Connection) -> None:
    """Rows an older release kept once acknowledged (``acked = 1``)."""
    conn.execute("DELETE FROM outbox WHERE acked = 1")


def forget_acknowledged(
    conn: sqlite3.Connection,
    event_ids: Sequence[str],
    settled: Sequence[str],
    *,
    keep_above: int,
    swept: int,
) -> None:
    """The hub applied ``event_ids``: they leave the outbox; the dispatches
    they ``settled`` lose their bodies, or their rows when they are at or
    below ``keep_above``; compacted rows above ``swept`` (the last sweep)
    and at or below ``keep_above`` go."""
    marks = ",".join("?" * len(event_ids))
    conn.execute(f"DELETE FROM outbox WHERE event_id IN ({marks})", tuple(event_ids))
    if settled:
        # Rows already past the kept ones go at once, not compacted first.
        forget, compact = settled_statements(len(settled))
        conn.execute(forget, (keep_above, *settled))
        conn.execute(compact, (COMPACTED, *settled))
        # Only the rows the position has left behind since the last sweep:
        # below them, the done rows still waiting for their events' acks are
        # many under load, and none is compacted.
        conn.execute(
            "DELETE FROM inbox WHERE state = 'done' AND seq > ? AND seq <= ? AND envelope = ?",
            (swept, keep_above, COMPACTED),
        )


def any_pending(conn: sqlite3.Connection) -> bool:
    """Whether any envelope waits to be processed."""
    (busy,) = conn.execute("SELECT EXISTS (SELECT 1 FROM inbox WHERE state = 'pending')").fetchone()
    return bool(busy)


def settled_statements(n: int) -> tuple[str, str]:
    """An acknowledgement's statements over ``n`` settled dispatch ids: delete
    those at or below a seq, compact the rest. Both find the rows by dispatch
    id: the ``+`` keeps SQLite off the (state, seq) index, whose range would
    hold every done row still waiting for its events' acks."""
    among = f"dispatch_id IN ({','.join('?' * n)})"
    return (
        f"DELETE FROM inbox WHERE +state = 'done' AND +seq <= ? AND {among}",
        f"UPDATE inbox SET envelope = ? WHERE +state = 'done' AND {among}",
    )


def set_aside(conn: sqlite3.Connection, event_id: str, reason: str, now: float) -> None:
    """Move an event that cannot be shipped from the outbox to the dead letters."""
    conn.execute(
        "INSERT INTO dead_letter (source, reason, data, at)"
        " SELECT 'outbox', ?, frame, ? FROM outbox WHERE event_id = ?",
        (reason, now, event_id),
    )
    conn.execute("DELETE FROM outbox WHERE event_id = ?", (event_id,))
