"""What the run scheduler reads: the next rows to process, and a run's record."""

from __future__ import annotations

import sqlite3
from typing import Any

from runtime import RunStatus

NEXT_PENDING = (
    "SELECT dispatch_id, run_id, seq, envelope FROM inbox"
    " WHERE state = 'pending' AND (seq IS NULL OR seq > ?) ORDER BY seq, rowid LIMIT ?"
)
"""The next pending envelopes: release 1's (no seq: NULL sorts first) in
arrival order, then by seq. The index ``(state, seq)`` holds its rows in
``(seq, rowid)`` order, so this walks it from the first pending row and stops
at the limit, however many wait behind (an order the index cannot give made
SQLite sort every pending row for each batch)."""

Row = tuple[str, str, int | None, bytes]
"""``(dispatch_id, run_id, seq, envelope)``."""


def next_rows(conn: sqlite3.Connection, last_seq: int, limit: int) -> tuple[list[Row], bool]:
    """Up to ``limit`` rows in processing order, and whether they are held
    ones: the rows a run held while it waited for an approval, once it no
    longer waits (oldest seq first); else the pending ones after ``last_seq``
    (release 1's first)."""
    held = conn.execute(
        "SELECT i.dispatch_id, i.run_id, i.seq, i.envelope FROM inbox AS i"
        " JOIN run AS r ON r.run_id = i.run_id"
        " WHERE i.state = 'held' AND r.status != ?"
        " ORDER BY i.seq, i.rowid LIMIT ?",
        (RunStatus.WAITING, limit),
    ).fetchall()
    if held:
        return [_row(r) for r in held], True
    return [_row(r) for r in conn.execute(NEXT_PENDING, (last_seq, limit))], False


def _row(row: Any) -> Row:
    dispatch_id, run_id, seq, envelope = row
    return dispatch_id, run_id, seq, bytes(envelope)


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
