"""The hub's applied state of a deployment's runs (``hub.state``), for a new owner.

A sidecar that took a deployment over from another home starts from what
the hub applied, not from its own disk (``Welcome.from_hub``). It pages
through every run of the deployment in run id order; a page holds at least
one run and stays well under NATS' max payload.
"""

from __future__ import annotations

from typing import Any

import msgspec

from runtime import FrameDecoder, RunSnapshot, RunStates, StateGet

from ..store import Store
from .ownership import floor_seq
from .sessions import SessionTable

PAGE_BYTES = 256 * 1024
PAGE_RUNS = 500

_RUNS = """
SELECT id, status, state, last_seq, result, error FROM workflow_run
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
        async with db.execute(_RUNS, (dep, req.after_run_id, PAGE_RUNS + 1)) as cur:
            rows = list(await cur.fetchall())
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
            )
            size += len(msgspec.msgpack.encode(snapshot))
            if runs and size > PAGE_BYTES:
                break
            runs.append(snapshot)
        more = len(runs) < len(rows)
        return RunStates(runs=runs, floor_seq=await floor_seq(db, dep), more=more)


def _json(text: str | bytes | None) -> Any:
    return msgspec.json.decode(text) if text else None
