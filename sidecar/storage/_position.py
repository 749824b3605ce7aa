"""Where processing stands in the inbox: the position and the rows done.

The position (``meta.last_seq``) is the highest seq processed in order:
every seq at or below it is done (or held by its run), whether or not its
row is still kept. It moves when a step commits, when the hub's floor
rises, and over rows that were done out of order: the runs of a deployment
are processed concurrently, so a run's items commit while a lower seq of
another run is still being handled (and rows set aside, skipped, or release
1 rows that learned their seq late).

Above the position, the known prefix (:func:`known_through`) is how far
every seq has a row: a run may take an item only within it, since a seq not
delivered yet could be that run's.

At rest (:func:`at_rest`) is the end of it all: nothing left to process
(rows a run holds until a decision or a resume are not), nothing the hub
has not taken, what a sidecar waits for before it asks to sleep.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from runtime import RunStatus
from runtime.wire import holds_items

COMPACTED = b""
"""``inbox.envelope`` of a row whose body is gone: the hub has applied it
(its DispatchProcessed or EnvelopeQuarantined was acknowledged, or its seq
is at or below the hub's floor), so it is never processed here again."""


_HOLDING = ",".join(f"'{s.value}'" for s in RunStatus if holds_items(s))
"""The run statuses that hold their items, as SQL literals (fixed values)."""


def read_position(conn: sqlite3.Connection) -> int:
    """The processing position as the inbox keeps it (0: none yet)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()
    return int(row[0]) if row is not None else 0


def at_rest(conn: sqlite3.Connection) -> bool:
    """Whether nothing is left to do: no row pending (whatever keeps it: a
    gap below it, a retry's backoff), no held row its run has let go of,
    and no event the hub has not acknowledged.

    A row its run still holds (waiting for a decision, or suspended) is not
    work: only a new dispatch lets it go (the decision, the resume, a
    cancel), and the hub wakes an asleep deployment for that."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM inbox WHERE state = 'pending')"
        " OR EXISTS (SELECT 1 FROM inbox AS i WHERE i.state = 'held' AND NOT EXISTS"
        f" (SELECT 1 FROM run AS r WHERE r.run_id = i.run_id AND r.status IN ({_HOLDING})))"
        " OR EXISTS (SELECT 1 FROM outbox WHERE acked = 0)"
    ).fetchone()
    return not row[0]


_CHUNK = 512
"""Rows read at a time by the walks over seqs (a walk stops at its first gap)."""


def advance_over_done(
    conn: sqlite3.Connection, last: int, *, top: int | None = None, taken: Sequence[int] = ()
) -> int:
    """Move the processing position over seqs already done or held: those
    committed out of order, while a lower seq was still being handled, and
    release 1 rows that learned their seq after being processed.

    ``top``: no row has a higher seq (None: not known); ``taken``: seqs
    done or held by the caller's transaction. When these are every seq
    above ``last`` up to ``top``, the position goes to ``top`` without a
    walk (a lone mail's commit: its own row is the last one)."""
    if (
        top is not None
        and 0 <= top - last <= len(taken)
        and set(range(last + 1, top + 1)) <= set(taken)
    ):
        last = top
    else:
        last = _walk(conn, "state IN ('done', 'held')", last)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'last_seq'", (last,))
    return last


def highest_seq(conn: sqlite3.Connection) -> int:
    """The highest seq any row has (0: none)."""
    (top,) = conn.execute("SELECT max(seq) FROM inbox").fetchone()
    return int(top or 0)


def known_through(conn: sqlite3.Connection, start: int) -> int:
    """The highest seq up to which every seq above ``start`` has a row, in
    any state: items within it can be taken, no lower seq is still unknown.
    ``start`` is the position, or a known prefix read before (rows above the
    position never go away, except by :func:`~sidecar.storage._adopt.adopt_hub_state`)."""
    # Pending rows are read by the index ``(state, seq)``; the others above
    # a known prefix are few (rows done, or moved, before their turn).
    start = _walk(conn, "state = 'pending'", start)
    while True:
        moved = _walk(conn, "state IN ('done', 'held')", start)
        if moved == start:
            return start
        start = _walk(conn, "state = 'pending'", moved)


def _walk(conn: sqlite3.Connection, where: str, last: int) -> int:
    """From ``last``, over the consecutive seqs of the rows ``where`` selects."""
    # Most walks end at once: a look at the next seq alone (the index finds
    # it) spares the sort of every done row above, which a hanging run's
    # neighbours pile up.
    if (
        conn.execute(f"SELECT 1 FROM inbox WHERE {where} AND seq = ?", (last + 1,)).fetchone()
        is None
    ):
        return last
    while True:
        seqs = conn.execute(
            f"SELECT seq FROM inbox WHERE {where} AND seq > ? ORDER BY seq LIMIT ?",
            (last, _CHUNK),
        ).fetchall()
        for (seq,) in seqs:
            if seq == last:
                continue  # a stand-in beside its row
            if seq != last + 1:
                return last
            last = seq
        if len(seqs) < _CHUNK:
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
