"""The hub's applied state of a deployment's runs (``hub.state``), for a new owner.

A sidecar that took a deployment over from another home starts from what
the hub applied, not from its own disk (``Welcome.from_hub``). It pages
through every run of the deployment in run id order; a page holds at least
one run and stays well under NATS' max payload.

A run waiting for approvals names them (its gate is rebuilt from them), and
each page lists the seqs above the floor that are settled all the same (a
waiting run held the ones before them), so the new owner does not wait for
dispatches the hub will never send again: at most ``SETTLED_LIMIT`` of them,
far more than a deployment settles while one of its runs waits.
"""

from __future__ import annotations

from typing import Any

import msgspec

from runtime import FrameDecoder, RunSnapshot, RunStates, StateGet

from ..store import ApprovalStatus, DispatchStatus, Store, fetch_all
from .ownership import floor_seq
from .sessions import SessionTable

PAGE_BYTES = 256 * 1024
PAGE_RUNS = 500
SETTLED_LIMIT = 20_000

_RUNS = """
SELECT id, status, state, last_seq, result, error, last_step, parent_run_id, entrypoint,
       version
FROM workflow_run
WHERE deployment_id = ? AND is_anchor = 0 AND id > ?
ORDER BY id LIMIT ?
"""


class StateHandler:
    """Answers ``hub.state`` with RunStates (or Refused, from the session check)."""

    def __init__(self, *, store: Store, sessions: SessionTable) -> None:
        self._store = store
        self._sessions = sessions
        self._decoder: FrameDecoder[StateGet] = FrameDecoder(StateGet)

    async def __call__(self, data: bytes, sender: str | None) -> RunStates:
        req = self._decoder.decode(data)
        session = self._sessions.check(
            req.session_id, req.deployment_id, req.owner_epoch, sender=sender
        )
        dep = session.deployment_id
        db = self._store.db
        rows = await fetch_all(db, _RUNS, (dep, req.after_run_id, PAGE_RUNS + 1))
        waiting = await _approvals(db, [row["id"] for row in rows[:PAGE_RUNS]])
        runs: list[RunSnapshot] = []
        size = 0
        for row in rows[:PAGE_RUNS]:
            snapshot = RunSnapshot(
                run_id=row["id"],
                status=row["status"],
                state=_json(row["state"]) or {},
                last_seq=int(row["last_seq"] or 0),
                result=_json(row["result"]),
                error=row["error"],
                last_step=int(row["last_step"] or 0),
                approvals=waiting.get(row["id"], []),
                parent_run_id=row["parent_run_id"],
                entrypoint=row["entrypoint"],
                version=int(row["version"] or 0),
            )
            size += len(msgspec.msgpack.encode(snapshot))
            if runs and size > PAGE_BYTES:
                break
            runs.append(snapshot)
        more = len(runs) < len(rows)
        floor = await floor_seq(db, dep)
        rows = await fetch_all(
            db,
            "SELECT seq FROM workflow_run_dispatch WHERE deployment_id = ? AND seq > ?"
            " AND status IN (?, ?) ORDER BY seq LIMIT ?",
            (dep, floor, DispatchStatus.PROCESSED, DispatchStatus.CANCELLED, SETTLED_LIMIT),
        )
        settled = [int(row[0]) for row in rows]
        return RunStates(runs=runs, floor_seq=floor, more=more, settled=settled)


async def _approvals(db: Any, run_ids: list[str]) -> dict[str, list[str]]:
    """The pending approvals of these runs, in the order they were asked for."""
    if not run_ids:
        return {}
    found: dict[str, list[str]] = {}
    rows = await fetch_all(
        db,
        f"SELECT run_id, id FROM approval WHERE status = ? AND run_id IN"
        f" ({','.join('?' * len(run_ids))}) ORDER BY created_at, id",
        (ApprovalStatus.PENDING, *run_ids),
    )
    for run_id, approval_id in rows:
        found.setdefault(run_id, []).append(approval_id)
    return found


def _json(text: str | bytes | None) -> Any:
    return msgspec.json.decode(text) if text else None
