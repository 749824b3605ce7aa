"""Taking a deployment over from the hub's state.

When ownership comes from another home (a Welcome says ``from_hub``), what
this disk holds of the runs is not the owner's: the inbox takes the hub's
runs, states and floor instead, in one transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from runtime import RunSnapshot, RunStatus

from ._envelope import encode_run_state
from ._position import COMPACTED, advance_over_done, mark_settled
from ._recorded import replace_steps

ADOPT_MARK = "adopt"
"""Meta key set while the inbox must still take the hub's state (a Welcome
said ``from_hub``): durable, so a crash in between cannot leave a foreign
disk standing in for the owner's after a restart in the same home."""

_encode_json = msgspec.json.encode


def adopt_hub_state(
    conn: sqlite3.Connection,
    runs: Sequence[RunSnapshot],
    floor: int,
    settled: Sequence[int],
    now: float,
) -> int:
    """Inside the caller's transaction: become the owner from the hub's
    state; the new processing position.

    Ownership came from another home: what this disk holds of the runs is
    not the owner's. Every run's state and status become the hub's; the
    unshipped events go (the hub would apply them under the new epoch,
    effects included, though it never saw the items they came from);
    envelopes up to ``floor`` are done (and drop their bodies), and those
    above it are pending again, since the hub delivers them again and
    they are processed anew from the hub's state; except a compacted one:
    the hub applied it. Rows a run held are pending again too. ``settled``
    seqs above the floor (processed while a waiting run held earlier ones)
    are done: a row stands in for each one this disk lacks. The steps the
    hub recorded for the runs' open dispatches replace this disk's, so
    processing one again does not call them again. Clears the ``adopt``
    mark set when it began.
    """
    started = [r for r in runs if r.status != RunStatus.PENDING]
    conn.execute("DELETE FROM run")
    conn.execute("DELETE FROM run_state")
    conn.executemany(
        "INSERT INTO run (run_id, status, result, error, last_seq, created_at,"
        " updated_at, steps, approvals, parent_run_id, entrypoint, version)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                r.run_id,
                r.status,
                None if r.result is None else _encode_json(r.result),
                r.error,
                r.last_seq,
                now,
                now,
                r.last_step,
                _encode_json(r.approvals),
                r.parent_run_id,
                r.entrypoint,
                r.version,
            )
            for r in started
        ],
    )
    conn.executemany(
        "INSERT INTO run_state (run_id, state) VALUES (?, ?)",
        [(r.run_id, encode_run_state(r.state)) for r in started],
    )
    conn.execute("DELETE FROM outbox WHERE acked = 0")
    replace_steps(conn, [step for r in runs for step in r.steps])
    conn.execute("UPDATE inbox SET state = 'pending' WHERE state = 'held'")
    conn.execute(
        "UPDATE inbox SET state = 'done', outcome = 'skipped', processed_at = ?"
        " WHERE state = 'pending' AND seq <= ?",
        (now, floor),
    )
    # Settled at the hub: never processed here again (and the events
    # that would have said so at the hub are gone).
    conn.execute(
        "UPDATE inbox SET envelope = ? WHERE seq <= ? AND envelope != ?",
        (COMPACTED, floor, COMPACTED),
    )
    # A compacted row was applied by the hub: done for good.
    conn.execute(
        "UPDATE inbox SET state = 'pending', outcome = NULL, processed_at = NULL"
        " WHERE state = 'done' AND seq > ? AND envelope != ?",
        (floor, COMPACTED),
    )
    mark_settled(conn, [seq for seq in settled if seq > floor], now)
    last = advance_over_done(conn, floor)
    conn.execute("DELETE FROM meta WHERE key = ?", (ADOPT_MARK,))
    return last
