"""One processing step of a run, persisted in one transaction.

A run actor processes a batch of its run's envelopes and hands the outcome
over as a :class:`Commit`: the envelopes consumed (or held while the run
waits for an approval or is suspended), the run's new state and status, the
events for the outbox, the dead letters, a failed attempt of the item the
batch stopped at, and a resume's reset of the rows its run held.
:func:`write_step` writes it all or nothing, and only while the envelopes
are still pending (or held); it also clears the run's in-flight mark
(:func:`in_flight_key`) and moves the processing position as far as every
lower seq is done.
A run that ends cancels its live children, and theirs, in the same transaction.
It also drops the recorded steps of what it consumed (and a resume, the
failed ones of what its run held: ``_recorded``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import msgspec

from runtime import RecordDecodeError, RunCancelled, RunStatus, is_live, is_terminal, new_id

from .._errors import InboxConflict
from ._envelope import decode_envelope, encode_envelope
from ._outbox import Outgoing, add_events, outgoing
from ._position import advance_over_done
from ._recorded import drop_consumed, drop_failed_held, drop_runs

IN_FLIGHT = "in_flight"
"""The ``meta`` key naming the dispatches of the batch being processed (a
JSON list), written before the handler calls without waiting for the disk
and cleared by the step's commit: at a start, a mark still there says the
process died during that batch (``Inbox.charge_crash``). Each run's batch
has a key of its own (:func:`in_flight_key`): the runs are processed
concurrently; this one is an older process's."""


def in_flight_key(run_id: str) -> str:
    """The ``meta`` key naming the dispatches of ``run_id``'s batch in flight."""
    return f"{IN_FLIGHT}:{run_id}" if run_id else IN_FLIGHT


DEAD_LETTER = "dead_letter"
"""The outcome of a row that cannot be read: its bytes went to ``dead_letter``."""

_LIVE = tuple(s.value for s in RunStatus if is_live(s))
_LIVE_MARKS = ",".join("?" * len(_LIVE))
_PARENT_ENDED = "parent run ended"
_encode_json = msgspec.json.encode


@dataclass(slots=True)
class Commit:
    """Everything one processing step persists, in one transaction."""

    run_id: str
    status: str
    consumed: list[tuple[str, int | None, str]]  # (dispatch_id, seq, outcome)
    """A held row is consumed with seq None: the position passed it, or
    passes it as a held row."""
    held: list[tuple[str, int | None]] = field(default_factory=list)  # (dispatch_id, seq)
    """Pending rows the run holds now (it waits for an approval, or is
    suspended): the position moves over them, and they stay for after the
    decision or the resume."""
    attempt: tuple[str, str] | None = None  # (dispatch_id, error)
    """A handler call on that row failed: one more attempt, and its error."""
    resumed: int | None = None
    """A resume (of that workflow version) took the run out of suspension:
    the rows it holds start their attempts anew, at that version at least."""
    steps: int | None = None  # None: unchanged
    approvals: list[str] | None = None  # None: unchanged
    parent_run_id: str | None = None  # a child run's, set by its start item
    entrypoint: str | None = None  # a child run's, set by its start item
    version: int | None = None  # the workflow version of its latest item; None: unchanged
    state: bytes | None = None  # the run's state encoded (msgpack); None: unchanged
    result: bytes | None = None  # JSON
    error: str | None = None
    events: list[Outgoing] = field(default_factory=list)
    dead: list[tuple[str, bytes]] = field(default_factory=list)  # (reason, data)

    @property
    def changes_run(self) -> bool:
        """Whether it moves the run (anything but a failed attempt alone)."""
        return bool(self.consumed or self.held or self.events)


def write_step(
    conn: sqlite3.Connection,
    c: Commit,
    last_seq: int,
    now: float,
    steps: bool = False,
    top: int | None = None,
) -> tuple[int, list[str]]:
    """``c`` inside the caller's transaction, the position at ``last_seq``;
    the new position and the runs cancelled because a parent ended. Raises
    :class:`InboxConflict` when an envelope is no longer pending (or held).
    ``steps``: the inbox may hold recorded steps of ``c``'s dispatches or run
    (without, no statement looks for them). ``top``: no row has a higher seq
    (None: not known; :func:`advance_over_done`)."""
    seqs = [seq for _, seq, _ in c.consumed if seq is not None]
    seqs += [seq for _, seq in c.held if seq is not None]
    cur = conn.executemany(
        "UPDATE inbox SET state = 'done', outcome = ?, processed_at = ?"
        " WHERE dispatch_id = ? AND state IN ('pending', 'held')",
        [(outcome, now, dispatch_id) for dispatch_id, _, outcome in c.consumed],
    )
    if cur.rowcount != len(c.consumed):
        raise InboxConflict("an envelope was consumed meanwhile")
    if c.held:
        cur = conn.executemany(
            "UPDATE inbox SET state = 'held' WHERE dispatch_id = ? AND state = 'pending'",
            [(dispatch_id,) for dispatch_id, _ in c.held],
        )
        if cur.rowcount != len(c.held):
            raise InboxConflict("an envelope was consumed meanwhile")
    if c.attempt is not None:
        dispatch_id, error = c.attempt
        conn.execute(
            "UPDATE inbox SET attempts = attempts + 1, error = ? WHERE dispatch_id = ?",
            (error, dispatch_id),
        )
    if c.resumed is not None:
        if steps:
            drop_failed_held(conn, c.run_id)
        _resume_held(conn, c.run_id, c.resumed)
    conn.execute("DELETE FROM meta WHERE key IN (?, ?)", (IN_FLIGHT, in_flight_key(c.run_id)))
    # The position moves over this step's rows once every lower seq is done
    # (other runs commit concurrently, in any order), and over rows done
    # above it before (by other runs, set aside, skipped, or release 1 rows
    # that learned their seq while being processed).
    new_last = advance_over_done(conn, last_seq, top=top, taken=seqs)
    # A commit of a failed attempt alone leaves the run as it was (one
    # that has not started here stays unstarted: its RunStarted is to come).
    # A suspension on a row held already consumes and holds nothing new,
    # but has its event, and its status to write.
    cancelled = _write_run(conn, c, seqs, now) if c.changes_run else []
    if steps:
        drop_consumed(conn, ((d, outcome) for d, _, outcome in c.consumed))
        if is_terminal(c.status):
            drop_runs(conn, [c.run_id, *cancelled])
    if c.events:
        add_events(conn, c.events)
    if c.dead:
        conn.executemany(
            "INSERT INTO dead_letter (source, reason, data, at) VALUES ('inbox', ?, ?, ?)",
            [(reason, data, now) for reason, data in c.dead],
        )
    return new_last, cancelled


def _write_run(conn: sqlite3.Connection, c: Commit, seqs: list[int], now: float) -> list[str]:
    """The run's state and row as ``c`` leaves them; the runs cancelled
    because it ended."""
    if c.state is not None:
        conn.execute(
            "INSERT OR REPLACE INTO run_state (run_id, state) VALUES (?, ?)",
            (c.run_id, c.state),
        )
    approvals = None if c.approvals is None else _encode_json(c.approvals)
    conn.execute(
        "INSERT INTO run (run_id, status, result, error, last_seq, created_at,"
        " updated_at, steps, approvals, parent_run_id, entrypoint, version)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(run_id) DO UPDATE"
        " SET status = excluded.status, result = COALESCE(excluded.result, result),"
        " error = COALESCE(excluded.error, error),"
        " last_seq = COALESCE(excluded.last_seq, last_seq),"
        " updated_at = excluded.updated_at,"
        " steps = COALESCE(?, steps),"
        " approvals = COALESCE(excluded.approvals, approvals),"
        " version = COALESCE(?, version)",
        (
            c.run_id,
            c.status,
            c.result,
            c.error,
            max(seqs) if seqs else None,
            now,
            now,
            c.steps or 0,
            approvals,
            c.parent_run_id,
            c.entrypoint,
            c.version or 0,
            c.steps,
            c.version,
        ),
    )
    return _cancel_children(conn, c.run_id, now) if is_terminal(c.status) else []


def _resume_held(conn: sqlite3.Connection, run_id: str, version: int) -> None:
    """The rows ``run_id`` holds: their attempts start anew, and each takes
    the workflow version the resume carries, the deployment's active one (a
    new version may be what fixes them; after a rollback, the older one is
    what runs), as the hub re-stamped its open dispatches."""
    restamped: list[tuple[bytes, str]] = []
    for dispatch_id, data in conn.execute(
        "SELECT dispatch_id, envelope FROM inbox WHERE state = 'held' AND run_id = ?", (run_id,)
    ).fetchall():
        try:
            envelope = decode_envelope(bytes(data))
        except RecordDecodeError:
            continue  # set aside when its turn comes, whatever its version
        if max(envelope.version, 1) != version:
            envelope.version = version
            restamped.append((encode_envelope(envelope), dispatch_id))
    conn.executemany("UPDATE inbox SET envelope = ? WHERE dispatch_id = ?", restamped)
    conn.execute(
        "UPDATE inbox SET attempts = 0, error = NULL WHERE state = 'held' AND run_id = ?",
        (run_id,),
    )


def _cancel_children(conn: sqlite3.Connection, run_id: str, now: float) -> list[str]:
    """A run ended: its live children are cancelled, and theirs, in the
    ending run's transaction; each sends RunCancelled. Their items that come
    later are refused as for any ended run, held ones included."""
    cancelled: list[str] = []
    parents = [run_id]
    while parents:
        rows = conn.execute(
            f"UPDATE run SET status = ?, error = ?, updated_at = ?, approvals = '[]'"
            f" WHERE parent_run_id IN ({','.join('?' * len(parents))})"
            f" AND status IN ({_LIVE_MARKS}) RETURNING run_id",
            (RunStatus.CANCELLED, _PARENT_ENDED, now, *parents, *_LIVE),
        ).fetchall()
        parents = [row[0] for row in rows]
        cancelled += parents
    add_events(
        conn,
        [
            outgoing(
                RunCancelled(event_id=new_id("evt"), run_id=child, at=now, reason=_PARENT_ENDED)
            )
            for child in cancelled
        ],
    )
    return cancelled
