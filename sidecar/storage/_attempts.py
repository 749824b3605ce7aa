"""Failed attempts of items that the handler call did not get to record: a
process that died during the call, and a parked dispatch the hub retries.

A handler call that raises or overruns its timeout is recorded by its step's
commit (``Commit.attempt``). A process that dies during the call (SIGKILL,
``os._exit`` in the handler, the kernel's OOM killer) commits nothing, so
before a batch's calls the scheduler names its dispatches in the ``meta``
key of its run (:func:`~sidecar.storage._step.in_flight_key`), in a
transaction that does not wait for the disk (:func:`mark_in_flight`): the
mark survives the death of the process, only a crash of the machine may lose
it, and the healthy path gains no fsync. The step's commit clears it. At the
next start the marks still there name the batches the process died in
(:func:`charge_crash`): a single batch of one is charged the attempt; the
rows of a larger one, or of several batches (runs are processed
concurrently), are suspects, processed one a batch and alone in the process
from then on, so the next death is charged to the right row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from ._meta import write_meta
from ._position import COMPACTED
from ._step import IN_FLIGHT, in_flight_key

DIED = "SidecarDied: the sidecar process died while the handler was handling this item"
"""The error of an attempt the process died in."""

_ids = msgspec.json.Decoder(list[str])
_DELETE_MARKS = "DELETE FROM meta WHERE key = ? OR key LIKE ?"


def mark_in_flight(conn: sqlite3.Connection, dispatch_ids: Sequence[str], run_id: str) -> None:
    """The dispatches of ``run_id`` whose handler calls are about to run."""
    write_meta(conn, in_flight_key(run_id), msgspec.json.encode(list(dispatch_ids)).decode())


def clear_in_flight(conn: sqlite3.Connection) -> None:
    """No batch is in flight (an orderly stop)."""
    conn.execute(_DELETE_MARKS, (IN_FLIGHT, f"{IN_FLIGHT}:%"))


def charge_crash(conn: sqlite3.Connection) -> list[str]:
    """Read and clear the in-flight marks a dead process left: a single
    batch of one still unprocessed gets a failed attempt (:data:`DIED`); the
    unprocessed rows of a larger one, or of several, are returned, as
    suspects."""
    marks = conn.execute(
        "SELECT value FROM meta WHERE key = ? OR key LIKE ?", (IN_FLIGHT, f"{IN_FLIGHT}:%")
    ).fetchall()
    if not marks:
        return []
    clear_in_flight(conn)
    named: list[str] = []
    for (mark,) in marks:
        try:
            named += _ids.decode(mark)
        except msgspec.DecodeError:
            continue
    if not named:
        return []
    places = ",".join("?" * len(named))
    open_rows = [
        row[0]
        for row in conn.execute(
            f"SELECT dispatch_id FROM inbox WHERE state IN ('pending', 'held')"
            f" AND dispatch_id IN ({places})",
            named,
        )
    ]
    if len(named) == 1 and len(marks) == 1 and open_rows:
        conn.execute(
            "UPDATE inbox SET attempts = attempts + 1, error = ? WHERE dispatch_id = ?",
            (DIED, open_rows[0]),
        )
        return []
    return open_rows


RetryRow = tuple[str, bytes, int, float]
"""``(dispatch_id, envelope, seq, received_at)`` of a frame that may retry a parked row."""


def revive_parked(conn: sqlite3.Connection, rows: Sequence[RetryRow]) -> set[str]:
    """A frame for a dispatch this inbox holds as ``parked``, at a higher seq,
    is the hub's retry of it: the row is pending again at the new seq, with
    the frame's envelope (its body was dropped once the hub had the parked
    outcome) and its attempts anew. A done row stands in at its old seq: the
    position may not have passed it yet (rows commit out of order), and a
    seq without a row holds processing back. The dispatch ids revived."""
    revived: set[str] = set()
    for dispatch_id, envelope, seq, now in rows:
        conn.execute(
            "INSERT INTO inbox (dispatch_id, envelope, state, run_id, seq, outcome, received_at,"
            " processed_at) SELECT 'settled:' || seq, ?, 'done', '', seq, 'skipped', ?, ?"
            " FROM inbox WHERE dispatch_id = ? AND state = 'done' AND outcome = 'parked'"
            " AND seq < ? ON CONFLICT DO NOTHING",
            (COMPACTED, now, now, dispatch_id, seq),
        )
        cur = conn.execute(
            "UPDATE inbox SET state = 'pending', envelope = ?, seq = ?, outcome = NULL,"
            " processed_at = NULL, received_at = ?, attempts = 0, error = NULL"
            " WHERE dispatch_id = ? AND state = 'done' AND outcome = 'parked' AND seq < ?"
            " RETURNING dispatch_id",
            (envelope, seq, now, dispatch_id, seq),
        )
        revived.update(row[0] for row in cur.fetchall())
    return revived
