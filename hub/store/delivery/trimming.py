"""Runs' histories trimmed: the latest events of a run keep their payload,
older ones only their row.

``run_event`` keeps every event's row (id, kind, time) for good, so a
resent event is still recognised by its id and applies nothing; its payload
is kept for the run's latest ``keep`` events, and up to a quarter more
until the next trim. Trimmed in the ingest transaction, for the runs it
touched that are due (``hub.wire.events.processed.trim_every``), through an
index of the rows that still hold a payload, so the cost is that history,
not the run's past. A processed dispatch keeps its inline body while its
DispatchProcessed keeps its payload (replay calls the handler with it,
docs/replay.md), and loses it with that payload.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ..schema import DispatchStatus
from ..sql import Tx, sql


class _ProcessedId(msgspec.Struct, tag="DispatchProcessed", tag_field="t"):
    """What trimming reads of a DispatchProcessed: the rest is skipped unread."""

    dispatch_id: str


_processed_id = msgspec.msgpack.Decoder(_ProcessedId)

_SETTLED = (DispatchStatus.PROCESSED.value, DispatchStatus.CANCELLED.value)

# Every payload of the run (keep = 0), or those older than its ``keep``
# latest payloads, by ingestion order.
_EVERY = "run_id = ? AND payload IS NOT NULL"
_OLDER = (
    "run_id = ? AND payload IS NOT NULL AND rowid < (SELECT rowid FROM run_event"
    " WHERE run_id = ? AND payload IS NOT NULL ORDER BY rowid DESC LIMIT 1 OFFSET ?)"
)
_LEAVING_EVERY = sql(f"SELECT payload FROM run_event WHERE {_EVERY} AND kind = ?")
_LEAVING_OLDER = sql(f"SELECT payload FROM run_event WHERE {_OLDER} AND kind = ?")
_TRIM_EVERY = sql(f"UPDATE run_event SET payload = NULL WHERE {_EVERY}")
_TRIM_OLDER = sql(f"UPDATE run_event SET payload = NULL WHERE {_OLDER}")
# Settled dispatches of this run only: an open one's body is still to be
# delivered, whatever an event claims.
_DROP_BODY = sql(
    "UPDATE workflow_run_dispatch SET body = NULL WHERE id = ? AND run_id = ?"
    " AND status IN (?, ?) AND body IS NOT NULL"
)


def trim_history(tx: Tx, run_ids: Iterable[str], keep: int) -> None:
    """Inside the caller's write transaction: every event of ``run_ids`` but
    the ``keep`` latest (in ingestion order) loses its payload, and the
    dispatch of a DispatchProcessed among them its inline body."""
    for run_id in run_ids:
        params: tuple[object, ...]
        if keep <= 0:
            leaving, trim, params = _LEAVING_EVERY, _TRIM_EVERY, (run_id,)
        else:
            leaving, trim, params = _LEAVING_OLDER, _TRIM_OLDER, (run_id, run_id, keep - 1)
        payloads = tx.fetch_all(leaving, (*params, "DispatchProcessed"))
        tx.execute(trim, params)
        dispatch_ids: list[str] = []
        for row in payloads:
            try:
                dispatch_ids.append(_processed_id.decode(row[0]).dispatch_id)
            except msgspec.DecodeError:  # ValidationError included
                continue  # not one this hub wrote: it names no dispatch to trim
        tx.execute_many(
            _DROP_BODY, [(dispatch_id, run_id, *_SETTLED) for dispatch_id in dispatch_ids]
        )
