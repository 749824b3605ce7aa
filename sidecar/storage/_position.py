"""Where processing stands in the inbox: the position and the rows done.

The position (``meta.last_seq``) is the highest seq processed in order:
every seq at or below it is done, whether or not its row is still kept. It
moves when a step commits, when the hub's floor rises, and over rows that
were done out of order (set aside, skipped, or release 1 rows that learned
their seq late).
"""

from __future__ import annotations

import sqlite3

COMPACTED = b""
"""``inbox.envelope`` of a row whose body is gone: the hub has applied it
(its DispatchProcessed or EnvelopeQuarantined was acknowledged, or its seq
is at or below the hub's floor), so it is never processed here again."""


def read_position(conn: sqlite3.Connection) -> int:
    """The processing position as the inbox keeps it (0: none yet)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()
    return int(row[0]) if row is not None else 0


def advance_over_done(conn: sqlite3.Connection, last: int) -> int:
    """Move the processing position over seqs already done (release 1 rows
    that learned their seq after being processed)."""
    for (seq,) in conn.execute(
        "SELECT seq FROM inbox WHERE state = 'done' AND seq > ? ORDER BY seq", (last,)
    ).fetchall():
        if seq != last + 1:
            break
        last = seq
    conn.execute("UPDATE meta SET value = ? WHERE key = 'last_seq'", (last,))
    return last


def skip_up_to(conn: sqlite3.Connection, floor: int, now: float) -> int:
    """The hub settled every dispatch up to ``floor``: pending rows at or
    below it are done (``skipped``) without their bodies; how many."""
    cur = conn.execute(
        "UPDATE inbox SET state = 'done', outcome = 'skipped', processed_at = ?,"
        " envelope = ? WHERE state = 'pending' AND seq <= ?",
        (now, COMPACTED, floor),
    )
    return int(cur.rowcount)


def mark_settled(conn: sqlite3.Connection, seqs: list[int], now: float) -> None:
    """Seqs the hub settled while a waiting run held earlier ones: done here,
    a stand-in row for each one this inbox lacks."""
    if not seqs:
        return
    conn.executemany(
        "UPDATE inbox SET state = 'done', outcome = 'skipped', processed_at = ?, envelope = ?"
        " WHERE seq = ?",
        [(now, COMPACTED, seq) for seq in seqs],
    )
    # The dispatch id is not known here, and never delivered again: a stand-in.
    conn.executemany(
        "INSERT INTO inbox (dispatch_id, envelope, state, run_id, seq, outcome, received_at,"
        " processed_at) SELECT ?, ?, 'done', '', ?, 'skipped', ?, ? WHERE NOT EXISTS"
        " (SELECT 1 FROM inbox WHERE seq = ?)",
        [(f"settled:{seq}", COMPACTED, seq, now, now, seq) for seq in seqs],
    )
