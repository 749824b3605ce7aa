"""What the run scheduler reads: the next rows of a run that is not busy and the
batch they make, and a run's record."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from runtime import RecordDecodeError, RunStatus, is_terminal
from runtime.wire import holds_items

from ._envelope import Envelope, decode_envelope, decode_run_state

LOOKAHEAD = 4096
"""Pending rows of busy runs (being processed, or waiting out a backoff) the
search for a run to process next walks past, at most: a run whose next item
lies behind more of them waits for them to be processed."""

NEXT_PENDING = (
    "SELECT run_id, seq FROM (SELECT run_id, seq FROM inbox"
    " WHERE state = 'pending' AND seq > ? AND seq <= ? ORDER BY seq, rowid LIMIT ?)"
    " WHERE run_id NOT IN (SELECT value FROM json_each(?)) LIMIT 1"
)
"""The next run to process, and its first pending seq: the first pending row,
within the known prefix, of a run that is not busy. The index ``(state,
seq)`` holds its rows in ``(seq, rowid)`` order, so this walks it from the
first pending row and stops at the first fit, or at :data:`LOOKAHEAD` rows,
however many wait behind (an order the index cannot give made SQLite sort
every pending row for each batch)."""

RUN_PENDING = (
    "SELECT dispatch_id, run_id, seq, envelope, attempts, error FROM inbox"
    " WHERE state = 'pending' AND seq >= ? AND seq <= ? AND run_id = ? ORDER BY seq LIMIT ?"
)
"""A run's pending rows from its first, in seq order (the same index walk)."""

NEXT_RUN_PENDING = (
    f"WITH first AS ({NEXT_PENDING})"
    " SELECT dispatch_id, run_id, seq, envelope, attempts, error FROM inbox"
    " WHERE state = 'pending' AND seq >= (SELECT seq FROM first)"
    " AND seq <= MIN(?, (SELECT seq FROM first) + ?) AND run_id = (SELECT run_id FROM first)"
    " ORDER BY seq LIMIT ?"
)
""":data:`NEXT_PENDING`'s run's pending rows from its first, up to a seq and
at most :data:`LOOKAHEAD` past the first, as :data:`RUN_PENDING` reads them:
one statement where a lone mail's search ran two (SQLite reads the first
row's once; the walk is the index's, in its order). None: no run to take."""

NTH_PENDING = (
    "SELECT seq FROM inbox WHERE state = 'pending' AND seq > ? AND seq <= ?"
    " ORDER BY seq LIMIT 1 OFFSET ?"
)
"""The seq of the last pending row :data:`NEXT_PENDING` walks past (read from
the index alone), when it found none to take."""

LEGACY_PENDING = (
    "SELECT dispatch_id, run_id, seq, envelope, attempts, error FROM inbox"
    " WHERE state = 'pending' AND seq IS NULL ORDER BY rowid LIMIT ?"
)
"""Release 1's pending envelopes (no seq), in arrival order."""


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

Source = Literal["held", "legacy", "pending"]
"""Where a batch comes from: rows a run held, release 1's rows, pending ones."""

_HOLDING = tuple(s.value for s in RunStatus if holds_items(s))
_HOLDING_MARKS = ",".join("?" * len(_HOLDING))


def next_rows(
    conn: sqlite3.Connection,
    last_seq: int,
    known: int,
    busy: Sequence[str],
    limit: int,
    after: int = 0,
    *,
    legacy: bool = True,
    held: bool = True,
) -> tuple[list[Row], Source, int]:
    """Up to ``limit`` rows to process next, of one run that is not
    ``busy``, in its order; where they come from; and the seq up to which
    every pending row is a busy run's (0: not known; a later search passes
    it as ``after`` while those runs stay busy, and starts there).

    First the rows a run held while it waited for an approval or was
    suspended, once it no longer holds them (oldest seq first): they come
    before anything later of that run. Then release 1's pending rows (no
    seq), whatever is busy: they come before every row with a seq. Then the
    pending rows of the first run, in seq order, whose next row is within
    ``(last_seq, known]``: no seq below a row taken is still unknown, so no
    later delivery can put an item of that run before it. ``legacy``: False
    when no release 1 row can be pending, ``held``: False when no row can be
    held (the inbox knows both).

    The seq it returns goes as far as it can: past the rows it takes when
    they are every row from the first one it found to the end of the known
    prefix, so that the search after this one (the run taken is busy then)
    finds nothing without a query."""
    skip = msgspec.json.encode(list(busy)).decode()
    found = (
        conn.execute(
            "SELECT i.dispatch_id, i.run_id, i.seq, i.envelope, i.attempts, i.error FROM inbox AS i"
            " JOIN run AS r ON r.run_id = i.run_id"
            f" WHERE i.state = 'held' AND r.status NOT IN ({_HOLDING_MARKS})"
            " AND i.run_id NOT IN (SELECT value FROM json_each(?))"
            " ORDER BY i.seq, i.rowid LIMIT ?",
            (*_HOLDING, skip, limit),
        ).fetchall()
        if held
        else []
    )
    if found:
        return [_row(r) for r in found], "held", 0
    older = conn.execute(LEGACY_PENDING, (limit,)).fetchall() if legacy else []
    if older:
        return [_row(r) for r in older], "legacy", 0
    start = max(last_seq, after)
    params = (start, known, LOOKAHEAD, skip, known, LOOKAHEAD, limit)
    rows = conn.execute(NEXT_RUN_PENDING, params).fetchall()
    if not rows:  # a run found has its first row here at least
        end = conn.execute(NTH_PENDING, (start, known, LOOKAHEAD - 1)).fetchone()
        return [], "pending", known if end is None else int(end[0])
    seq = rows[0][2]
    # Every seq from ``seq`` to ``known`` in the rows taken: none is left there.
    whole = rows[-1][2] == known and known - seq == len(rows) - 1
    return [_row(r) for r in rows], "pending", known if whole else seq - 1


def run_rows(
    conn: sqlite3.Connection,
    run_id: str,
    last_seq: int,
    known: int,
    limit: int,
    *,
    legacy: bool = True,
    held: bool = True,
) -> tuple[list[Row], Source]:
    """Up to ``limit`` rows of ``run_id`` to process next, as
    :func:`next_rows` would take them: its held rows once it no longer
    holds them, else its pending ones within ``(last_seq, known]``; none
    while release 1's rows wait (they come first, :func:`next_rows`)."""
    found = (
        conn.execute(
            "SELECT i.dispatch_id, i.run_id, i.seq, i.envelope, i.attempts, i.error FROM inbox AS i"
            " JOIN run AS r ON r.run_id = i.run_id"
            f" WHERE i.state = 'held' AND i.run_id = ? AND r.status NOT IN ({_HOLDING_MARKS})"
            " ORDER BY i.seq, i.rowid LIMIT ?",
            (run_id, *_HOLDING, limit),
        ).fetchall()
        if held
        else []
    )
    if found:
        return [_row(r) for r in found], "held"
    if legacy and conn.execute(LEGACY_PENDING, (1,)).fetchone() is not None:
        return [], "legacy"
    rows = conn.execute(RUN_PENDING, (last_seq + 1, known, run_id, limit)).fetchall()
    return [_row(r) for r in rows], "pending"


def any_held(conn: sqlite3.Connection) -> bool:
    """Whether any row is held (by a run waiting or suspended, or let go of
    and not taken yet): while none is, a search need not look for them."""
    return bool(conn.execute(ANY_HELD).fetchone()[0])


ANY_HELD = "SELECT EXISTS (SELECT 1 FROM inbox WHERE state = 'held')"


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


def next_batch(rows: list[Row], source: Source) -> list[Pending]:
    """The batch ``rows`` make (as :func:`next_rows` gave them), all of one
    run: held ones of the first row's run, or consecutive release 1 ones of
    the first row's run, or the pending ones of one run as they are."""
    if not rows:
        return []
    run_id = rows[0][1]
    if source == "pending":
        return [_pending(row) for row in rows]
    if source == "held":
        return [_pending(row, held=True) for row in rows if row[1] == run_id]
    batch: list[Pending] = []
    for row in rows:
        if row[1] != run_id:
            break
        batch.append(_pending(row))
    return batch


def ended_meanwhile(conn: sqlite3.Connection, run_id: str, status: str) -> bool:
    """Whether ``run_id`` ended while its actor processed a batch from an
    earlier status: a parent that ended cancelled it (its runs are processed
    concurrently), so a commit moving it to ``status`` would undo that."""
    row = conn.execute("SELECT status FROM run WHERE run_id = ?", (run_id,)).fetchone()
    return row is not None and is_terminal(row[0]) and row[0] != status


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
