"""What delivery writes: the envelopes of a batch of frames, the seqs a
duplicate teaches, and the frames that did not decode (dead letters).

The envelopes go in as ONE multi-row ``INSERT OR IGNORE ... RETURNING``
statement: it names the rows it inserted, so duplicates are known without a
read first.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

GARBAGE_KEPT = 100
"""Frames that do not decode, kept as dead letters per subject (the latest)."""

GARBAGE_BYTES = 64 * 1024
"""What is kept of such a frame: enough to tell what it was."""

EnvelopeRow = tuple[str, bytes, str, int | None, float]
"""``(dispatch_id, envelope, run_id, seq, received_at)``."""


def insert_envelopes(conn: sqlite3.Connection, rows: Sequence[EnvelopeRow]) -> set[str]:
    """Store ``rows`` as pending unless their dispatch is there already; the
    dispatch ids stored."""
    if not rows:
        return set()
    cur = conn.execute(
        "INSERT OR IGNORE INTO inbox (dispatch_id, envelope, state, run_id, seq, received_at)"
        " VALUES "
        + ",".join(["(?, ?, 'pending', ?, ?, ?)"] * len(rows))
        + " RETURNING dispatch_id",
        [value for row in rows for value in row],
    )
    return {row[0] for row in cur.fetchall()}


def learn_seqs(conn: sqlite3.Connection, learned: Sequence[tuple[str, int]]) -> bool:
    """Rows stored without a seq (release 1) take the seq a duplicate frame
    carries, ``(dispatch_id, seq)``; whether any did."""
    if not learned:
        return False
    # Redelivered rows have their seq already: the common case matches nothing.
    cur = conn.execute(
        "UPDATE inbox SET seq = v.column2 FROM (VALUES "
        + ",".join(["(?, ?)"] * len(learned))
        + ") AS v WHERE inbox.dispatch_id = v.column1 AND inbox.seq IS NULL"
        " RETURNING inbox.dispatch_id",
        [value for pair in learned for value in pair],
    )
    return bool(cur.fetchall())


def keep_dead_letters(
    conn: sqlite3.Connection, dead: Sequence[tuple[str, str, bytes]], now: float
) -> None:
    """Frames that did not decode, ``(source, reason, data)``: their first
    :data:`GARBAGE_BYTES`, and only the :data:`GARBAGE_KEPT` latest per source."""
    conn.executemany(
        "INSERT INTO dead_letter (source, reason, data, at) VALUES (?, ?, ?, ?)",
        [(source, reason, data[:GARBAGE_BYTES], now) for source, reason, data in dead],
    )
    # Whoever can publish here could fill the disk otherwise.
    conn.executemany(
        "DELETE FROM dead_letter WHERE source = ? AND id <= (SELECT id FROM"
        " dead_letter WHERE source = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
        [(source, source, GARBAGE_KEPT) for source in {d[0] for d in dead}],
    )


def known_dispatches(conn: sqlite3.Connection, dispatch_ids: Sequence[str]) -> set[str]:
    """Which of these dispatches the inbox holds (a parked one does not count:
    a frame for it is the hub's retry, whose body is stored again)."""
    marks = ",".join("?" * len(dispatch_ids))
    rows = conn.execute(
        f"SELECT dispatch_id FROM inbox WHERE dispatch_id IN ({marks})"
        " AND NOT (state = 'done' AND outcome = 'parked')",
        tuple(dispatch_ids),
    )
    return {row[0] for row in rows}
