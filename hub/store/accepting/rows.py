"""What an accepted batch writes: its new top-level runs, its dispatches,
the blobs of their claim-checked bodies and raw messages, each woken
deployment's next seq and the approvals it decided (their expiries
dropped), each kind in a few statements.

Runs and dispatches go in many rows a statement (``hub.store.sql``'s
``insert_rows``): both tables have change triggers, whose setup costs about
as much as a row each time a statement runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..sql import Tx, insert_rows, insert_statement, sql


class NewDispatch(NamedTuple):
    """A dispatch as the accept inserts it: the INSERT's columns, in order."""

    id: str
    deployment_id: str
    run_id: str
    seq: int
    kind: str
    message_id: str | None
    sender: str | None
    subject: str | None
    body: bytes | None  # None: claim-checked (``body_digest`` names its blob)
    body_digest: str | None
    body_size: int
    status: str
    created_at: float
    version: int
    raw_digest: str | None
    raw_size: int | None
    context: bytes | None  # msgpack of the mail's MailContext (None: not mail)


class NewRun(NamedTuple):
    """A top-level run minted by its deployment's first trigger."""

    id: str
    deployment_id: str
    is_anchor: int
    is_top_level: int
    status: str
    created_at: float
    updated_at: float


_DROP_EXPIRY = sql(
    "DELETE FROM timer WHERE run_id = (SELECT run_id FROM approval WHERE id = ?1)"
    " AND kind = 'approval' AND name = ?1"
)
_INSERT_RUNS = insert_statement("workflow_run", NewRun._fields)
_INSERT_DISPATCHES = insert_statement("workflow_run_dispatch", NewDispatch._fields)
# With several hubs, another hub's blob collection may be deciding that a
# blob is unused while this batch names it again: on PostgreSQL the upsert
# locks the row and makes it new, and collection spares new blobs
# (``delivery/blobs.py``'s grace). One hub on SQLite collects between its
# own writes.
_INSERT_BLOB = sql(
    "INSERT OR IGNORE INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
    postgres="INSERT INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (digest) DO UPDATE SET created_at = EXCLUDED.created_at",
)
_NEXT_SEQ = sql("UPDATE deployment SET next_seq = ? WHERE id = ?")
_DECIDE = sql("UPDATE approval SET status = ?, decision = ?, decided_at = ? WHERE id = ?")


def write_rows(
    tx: Tx,
    *,
    runs: Sequence[NewRun],
    blobs: Sequence[tuple[object, ...]],
    dispatches: Sequence[NewDispatch],
    next_seqs: Sequence[tuple[int, str]],
    decided: Sequence[tuple[object, ...]],
) -> None:
    """A batch's rows, in the order their keys need: runs before the
    dispatches that name them. ``blobs`` are ``(digest, size, data,
    created_at)``, ``next_seqs`` ``(next_seq, deployment_id)``, ``decided``
    ``(status, decision, decided_at, approval_id)``: a decided approval's
    expiry goes with it."""
    insert_rows(tx, _INSERT_RUNS, runs)
    tx.execute_many(_INSERT_BLOB, blobs)
    insert_rows(tx, _INSERT_DISPATCHES, dispatches)
    tx.execute_many(_NEXT_SEQ, next_seqs)
    tx.execute_many(_DECIDE, decided)
    # A decided approval's expiry (a ``timer`` row of kind ``approval``,
    # hub/store/clock) will not fire: the accept path drops it here, as the
    # clock room cannot be imported from the accept path it fires through.
    tx.execute_many(_DROP_EXPIRY, [(str(row[3]),) for row in decided])
