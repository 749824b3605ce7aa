"""Failed attempts of items that the handler call did not get to record: a
process that died during the call, and a parked dispatch the hub retries.

A handler call that raises or overruns its timeout is recorded by its step's
commit (``Commit.attempt``). A process that dies during the call (SIGKILL,
``os._exit`` in the handler, the kernel's OOM killer) commits nothing, so
before a batch's calls the scheduler names its dispatches in the ``meta``
key :data:`~sidecar.storage._step.IN_FLIGHT`, in a transaction that does not
wait for the disk (:func:`mark_in_flight`): the mark survives the death of
the process, only a crash of the machine may lose it, and the healthy path
gains no fsync. The step's commit clears it. At the next start a mark still
there names the batch the process died in (:func:`charge_crash`): a batch of
one is charged the attempt; the rows of a larger one are suspects, processed
one a batch from then on (as every row with a failed attempt is), so the
next death is charged to the right row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from ._meta import read_meta, write_meta
from ._step import IN_FLIGHT

DIED = "SidecarDied: the sidecar process died while the handler was handling this item"
"""The error of an attempt the process died in."""

_ids = msgspec.json.Decoder(list[str])


def mark_in_flight(conn: sqlite3.Connection, dispatch_ids: Sequence[str]) -> None:
    """The dispatches whose handler calls are about to run."""
    write_meta(conn, IN_FLIGHT, msgspec.json.encode(list(dispatch_ids)).decode())


def charge_crash(conn: sqlite3.Connection) -> list[str]:
    """Read and clear the in-flight mark a dead process left: a batch of one
    still unprocessed gets a failed attempt (:data:`DIED`); the unprocessed
    rows of a larger one are returned, as suspects."""
    mark = read_meta(conn, IN_FLIGHT)
    if mark is None:
        return []
    conn.execute("DELETE FROM meta WHERE key = ?", (IN_FLIGHT,))
    try:
        named = _ids.decode(mark)
    except msgspec.DecodeError:
        return []
    marks = ",".join("?" * len(named))
    open_rows = [
        row[0]
        for row in conn.execute(
            f"SELECT dispatch_id FROM inbox WHERE state IN ('pending', 'held')"
            f" AND dispatch_id IN ({marks})",
            named,
        )
    ]
    if len(named) == 1 and open_rows:
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
    outcome) and its attempts anew. The dispatch ids revived."""
    revived: set[str] = set()
    for dispatch_id, envelope, seq, now in rows:
        cur = conn.execute(
            "UPDATE inbox SET state = 'pending', envelope = ?, seq = ?, outcome = NULL,"
            " processed_at = NULL, received_at = ?, attempts = 0, error = NULL"
            " WHERE dispatch_id = ? AND state = 'done' AND outcome = 'parked' AND seq < ?"
            " RETURNING dispatch_id",
            (envelope, seq, now, dispatch_id, seq),
        )
        revived.update(row[0] for row in cur.fetchall())
    return revived
