"""Recorded steps: the outcome of each ``ctx.step`` of a dispatch being
processed, kept until the dispatch is consumed.

A step's record is made durable in a transaction of its own, before the
handler goes on, together with its ``StepRecorded`` event in the outbox
(:func:`record_step`): the same dispatch processed again (a handler's retry,
a restart after a crash) reads it back (:func:`read_steps`) instead of
calling the step again. The commit that consumes the dispatch deletes its
steps (:func:`drop_consumed`), except a parked one's successful steps: a
``mailrun retry`` brings the same dispatch back, and only its failed steps
are tried again. A resume drops the failed steps of the rows its run held
(:func:`drop_failed_held`), and a run that ends drops all of its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

import msgspec

from runtime import DispatchOutcome, new_id
from runtime.wire import StepRecorded

from ._outbox import add_events, outgoing

STEP_TABLE = """
CREATE TABLE IF NOT EXISTS step (
  dispatch_id TEXT NOT NULL,
  name        TEXT NOT NULL,
  idx         INTEGER NOT NULL,
  run_id      TEXT NOT NULL,
  result      BLOB,
  error       TEXT,
  attempts    INTEGER NOT NULL,
  at          REAL NOT NULL,
  PRIMARY KEY (dispatch_id, name)
)
"""
"""Migration 6's table: ``result`` is the step's result as JSON bytes."""

_INSERT = (
    "INSERT OR REPLACE INTO step (dispatch_id, name, idx, run_id, result, error, attempts, at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_PARKED = DispatchOutcome.PARKED.value


def _row(s: StepRecorded) -> tuple[object, ...]:
    result = None if s.error is not None else msgspec.json.encode(s.result)
    return (s.dispatch_id, s.name, s.index, s.run_id, result, s.error, s.attempts, s.at)


def record_step(conn: sqlite3.Connection, step: StepRecorded) -> None:
    """``step``'s row, and its event in the outbox, inside the caller's transaction."""
    conn.execute(_INSERT, _row(step))
    add_events(conn, [outgoing(step)])


def read_steps(conn: sqlite3.Connection, dispatch_id: str) -> dict[str, StepRecorded]:
    """The steps recorded for ``dispatch_id``, by name."""
    rows = conn.execute(
        "SELECT name, idx, run_id, result, error, attempts, at FROM step WHERE dispatch_id = ?",
        (dispatch_id,),
    )
    return {
        name: StepRecorded(
            event_id=new_id("evt"),
            run_id=run_id,
            at=at,
            dispatch_id=dispatch_id,
            name=name,
            index=idx,
            result=None if result is None else msgspec.json.decode(bytes(result)),
            error=error,
            attempts=attempts,
        )
        for name, idx, run_id, result, error, attempts, at in rows
    }


def dispatches_with_steps(conn: sqlite3.Connection) -> set[str]:
    """Every dispatch that has a recorded step."""
    return {row[0] for row in conn.execute("SELECT DISTINCT dispatch_id FROM step")}


def drop_consumed(conn: sqlite3.Connection, consumed: Iterable[tuple[str, str]]) -> None:
    """The steps of these ``(dispatch_id, outcome)`` consumed now: all of
    them, except a parked dispatch's successful ones (its retry returns them)."""
    gone: list[tuple[str]] = []
    parked: list[tuple[str]] = []
    for dispatch_id, outcome in consumed:
        (parked if outcome == _PARKED else gone).append((dispatch_id,))
    conn.executemany("DELETE FROM step WHERE dispatch_id = ?", gone)
    conn.executemany("DELETE FROM step WHERE dispatch_id = ? AND error IS NOT NULL", parked)


def drop_failed_held(conn: sqlite3.Connection, run_id: str) -> None:
    """A resume: the failed steps of the rows ``run_id`` holds (the one it
    failed on) are tried again; successful ones stay."""
    conn.execute(
        "DELETE FROM step WHERE error IS NOT NULL AND dispatch_id IN"
        " (SELECT dispatch_id FROM inbox WHERE state = 'held' AND run_id = ?)",
        (run_id,),
    )


def drop_runs(conn: sqlite3.Connection, run_ids: Sequence[str]) -> None:
    """Runs that ended: none of their dispatches is processed again."""
    conn.executemany("DELETE FROM step WHERE run_id = ?", [(r,) for r in run_ids])


def replace_steps(conn: sqlite3.Connection, steps: Iterable[StepRecorded]) -> None:
    """A takeover: the hub's records of its open dispatches replace this disk's."""
    conn.execute("DELETE FROM step")
    conn.executemany(_INSERT, [_row(s) for s in steps])
