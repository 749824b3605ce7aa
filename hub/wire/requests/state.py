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

A run comes with the steps recorded for its dispatches the hub has not
settled (``RunSnapshot.steps``), as many as fit in the frame: a page never
passes ``MAX_FRAME_BYTES``, so a run whose steps do not all fit gets the
first ones, and the new owner calls the others again when it processes
their dispatch (at most one step result is ``MAX_STEP_RESULT``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec

from runtime import FrameDecoder, RunSnapshot, RunStates, StateGet
from runtime.wire import MAX_FRAME_BYTES, StepRecorded

from ...store import Store, read_state_page
from ..sessions import SessionTable

PAGE_BYTES = 256 * 1024
PAGE_RUNS = 500
SETTLED_LIMIT = 20_000
FRAME_SLACK = 4 * 1024
"""Bytes a page keeps below ``MAX_FRAME_BYTES`` for the frame around its runs."""


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
        page = await self._store.read(
            partial(
                read_state_page,
                deployment_id=session.deployment_id,
                after_run_id=req.after_run_id,
                runs=PAGE_RUNS,
                settled=SETTLED_LIMIT,
            )
        )
        runs: list[RunSnapshot] = []
        size = 0
        room = MAX_FRAME_BYTES - len(msgspec.msgpack.encode(page.settled))
        for row in page.runs[:PAGE_RUNS]:
            snapshot = RunSnapshot(
                run_id=row.id,
                status=row.status,
                state=_json(row.state) or {},
                last_seq=int(row.last_seq or 0),
                result=_json(row.result),
                error=row.error,
                last_step=int(row.last_step or 0),
                approvals=page.approvals.get(row.id, []),
                parent_run_id=row.parent_run_id,
                entrypoint=row.entrypoint,
                version=int(row.version or 0),
            )
            size += len(msgspec.msgpack.encode(snapshot))
            if runs and size > PAGE_BYTES:
                break
            size += _fill_steps(snapshot, page.steps.get(row.id, []), room - size)
            runs.append(snapshot)
        more = len(runs) < len(page.runs)
        return RunStates(runs=runs, floor_seq=page.floor_seq, more=more, settled=page.settled)


def _fill_steps(snapshot: RunSnapshot, steps: list[StepRecorded], room: int) -> int:
    """Give ``snapshot`` the first of ``steps`` that fit in ``room`` bytes;
    the bytes they take."""
    taken = 0
    for step in steps:
        size = len(msgspec.msgpack.encode(step))
        if taken + size > room - FRAME_SLACK:
            break
        snapshot.steps.append(step)
        taken += size
    return taken


def _json(text: str | bytes | None) -> Any:
    return msgspec.json.decode(text) if text else None
