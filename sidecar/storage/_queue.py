"""What the run scheduler reads: the next rows and the batch they make, and a run's record."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

import msgspec

from runtime import RecordDecodeError, RunStatus
from runtime.wire import holds_items

from ._envelope import Envelope, decode_envelope, decode_run_state

NEXT_PENDING = (
    "SELECT dispatch_id, run_id, seq, envelope, attempts, error FROM inbox"
    " WHERE state = 'pending' AND (seq IS NULL OR seq > ?) ORDER BY seq, rowid LIMIT ?"
)
"""The next pending envelopes: release 1's (no seq: NULL sorts first) in
arrival order, then by seq. The index ``(state, seq)`` holds its rows in
``(seq, rowid)`` order, so this walks it from the first pending row and stops
at the limit, however many wait behind (an order the index cannot give made
SQLite sort every pending row for each batch)."""


@dataclass(frozen=True, slots=True)
class Pending:
    """One pending inbox row; ``envelope`` is None when it cannot be read.

    ``held``: a row its run held while it waited for an approval or was
    suspended (behind the processing position, so consuming it does not
    move the position). ``attempts``: the handler calls on it that failed
    so far, ``failure`` the last one's error."""

    dispatch_id: str
    run_id: str
    seq: int | None
    envelope: Envelope | None
    raw: bytes
    error: str = ""
    held: bool = False
    attempts: int = 0
    failure: str = ""


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    status: str | None  # None: the run has not started here
    state: dict[str, Any]
    last_seq: int | None
    state_error: str | None = None  # the stored state is unreadable ({} stands in)
    steps: int = 0  # items processed so far
    approvals: list[str] = field(default_factory=list)  # waited for (status waiting)
    parent_run_id: str | None = None  # a child run's parent
    entrypoint: str | None = None  # a child run's handler
    version: int = 0  # the workflow version of its latest item (0: none yet)


Row = tuple[str, str, int | None, bytes, int, str]
"""``(dispatch_id, run_id, seq, envelope, attempts, error)``."""

_HOLDING = tuple(s.value for s in RunStatus if holds_items(s))
_HOLDING_MARKS = ",".join("?" * len(_HOLDING))


def next_rows(conn: sqlite3.Connection, last_seq: int, limit: int) -> tuple[list[Row], bool]:
    """Up to ``limit`` rows in processing order, and whether they are held
    ones: the rows a run held while it waited for an approval or was
    suspended, once it no longer holds them (oldest seq first); else the
    pending ones after ``last_seq`` (release 1's first)."""
    held = conn.execute(
        "SELECT i.dispatch_id, i.run_id, i.seq, i.envelope, i.attempts, i.error FROM inbox AS i"
        " JOIN run AS r ON r.run_id = i.run_id"
        f" WHERE i.state = 'held' AND r.status NOT IN ({_HOLDING_MARKS})"
        " ORDER BY i.seq, i.rowid LIMIT ?",
        (*_HOLDING, limit),
    ).fetchall()
    if held:
        return [_row(r) for r in held], True
    return [_row(r) for r in conn.execute(NEXT_PENDING, (last_seq, limit))], False


def _row(row: Any) -> Row:
    dispatch_id, run_id, seq, envelope, attempts, error = row
    return dispatch_id, run_id, seq, bytes(envelope), int(attempts or 0), error or ""


def read_run(conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...]:
    """``(status, last_seq, state, steps, approvals, parent_run_id,
    entrypoint, version)`` of a run; all None when it has not started here."""
    row = conn.execute(
        "SELECT r.status, r.last_seq, s.state, r.steps, r.approvals, r.parent_run_id,"
        " r.entrypoint, r.version"
        " FROM (SELECT ? AS id) AS q"
        " LEFT JOIN run AS r ON r.run_id = q.id"
        " LEFT JOIN run_state AS s ON s.run_id = q.id",
        (run_id,),
    ).fetchone()
    return tuple(row)


def next_batch(rows: list[Row], last_seq: int, *, held: bool) -> list[Pending]:
    """The batch ``rows`` make (as :func:`next_rows` gave them), all of one
    run: held ones of the first row's run; else consecutive ones, release
    1's (no seq) or those from ``last_seq + 1`` on. A gap (a frame not
    delivered yet) stops the batch: it never reorders."""
    if held:
        run_id = rows[0][1]
        return [_pending(row, held=True) for row in rows if row[1] == run_id]
    batch: list[Pending] = []
    expected = last_seq + 1
    for row in rows:
        run_id, seq = row[1], row[2]
        if batch and (run_id != batch[0].run_id or (seq is None) != (batch[0].seq is None)):
            break
        if seq is not None:
            if seq != expected:
                break
            expected += 1
        batch.append(_pending(row))
    return batch


def run_record(run_id: str, row: tuple[Any, ...]) -> RunRecord:
    """The record :func:`read_run`'s row makes; an unreadable state is
    reported (``state_error``), its bytes stay as they are."""
    status, last_seq, data, steps, approvals, parent, entrypoint, version = row
    state: dict[str, Any] = {}
    error = None
    if data is not None:
        try:
            state = decode_run_state(bytes(data))
        except RecordDecodeError as exc:
            error = str(exc)
    return RunRecord(
        run_id,
        status,
        state,
        last_seq,
        state_error=error,
        steps=int(steps or 0),
        approvals=_approvals.decode(approvals) if approvals else [],
        parent_run_id=parent,
        entrypoint=entrypoint,
        version=int(version or 0),
    )


_approvals = msgspec.json.Decoder(list[str])


def _pending(row: Row, *, held: bool = False) -> Pending:
    dispatch_id, run_id, seq, data, attempts, failure = row
    try:
        envelope = decode_envelope(data)
    except RecordDecodeError as exc:
        return Pending(dispatch_id, run_id, seq, None, data, str(exc), held, attempts, failure)
    return Pending(dispatch_id, run_id, seq, envelope, data, "", held, attempts, failure)
