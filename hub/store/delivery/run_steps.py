"""The steps a new owner takes over: the latest record of each step of a
run's dispatches that are open (or parked), as ``run_event`` keeps them.

A sidecar records each ``ctx.step``'s outcome as a ``StepRecorded`` event,
shipped before its item commits; a new owner (``hub.state``) processes the
run's open dispatches again, and returns these records instead of calling
the steps again. The latest record of a step wins (a step tried again
after a resume records again). A failure is carried while it is current:
one recorded before its dispatch was parked, or before its run was
suspended on it, is not, since a retry or a resume tries that step again
(as its first owner drops it then: sidecar/storage/_recorded.py). A record
whose payload the run's retention trimmed is gone: its step runs again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from runtime import FrameDecodeError, FrameDecoder
from runtime.wire import StepRecorded

from ..schema import DispatchStatus
from ..sql import Tx, sql

log = logging.getLogger("mailrun.hub.state")

# By the partial index of the events that keep their payload.
_STEPS = sql(
    "SELECT rowid, run_id, payload FROM run_event WHERE kind = 'StepRecorded'"
    " AND payload IS NOT NULL AND run_id IN (SELECT value FROM json_each(?)) ORDER BY rowid",
    postgres="SELECT rowid, run_id, payload FROM run_event WHERE kind = 'StepRecorded'"
    " AND payload IS NOT NULL AND run_id IN"
    " (SELECT value FROM json_array_elements_text(CAST(? AS json))) ORDER BY rowid",
)
# What makes a failure stale: its dispatch parked, or its run suspended on it.
_SET_ASIDE = sql(
    "SELECT rowid, kind, payload FROM run_event WHERE kind IN ('DispatchProcessed',"
    " 'RunSuspended') AND payload IS NOT NULL AND rowid > ?"
    " AND run_id IN (SELECT value FROM json_each(?)) ORDER BY rowid",
    postgres="SELECT rowid, kind, payload FROM run_event WHERE kind IN ('DispatchProcessed',"
    " 'RunSuspended') AND payload IS NOT NULL AND rowid > ? AND run_id IN"
    " (SELECT value FROM json_array_elements_text(CAST(? AS json))) ORDER BY rowid",
)
_STATUS = sql(
    "SELECT id, status FROM workflow_run_dispatch WHERE id IN (SELECT value FROM json_each(?))",
    postgres="SELECT id, status FROM workflow_run_dispatch"
    " WHERE id IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)
_OPEN = (DispatchStatus.RESERVED.value, DispatchStatus.DELIVERED.value, DispatchStatus.PARKED.value)
_PARKED = "parked"


class _Names(msgspec.Struct):
    """A DispatchProcessed or RunSuspended read for its dispatch alone (the
    decoder skips the state)."""

    dispatch_id: str
    outcome: str = ""


_step_decoder: FrameDecoder[StepRecorded] = FrameDecoder(StepRecorded)
_names = msgspec.msgpack.Decoder(_Names)


def open_steps(tx: Tx, run_ids: Sequence[str]) -> dict[str, list[StepRecorded]]:
    """The latest record of each step of these runs' open or parked
    dispatches, when it is current, by run, in recorded order."""
    if not run_ids:
        return {}
    latest: dict[tuple[str, str], tuple[int, StepRecorded]] = {}
    for rowid, run_id, payload in tx.fetch_all(_STEPS, (_json(run_ids),)):
        try:
            step = _step_decoder.decode(bytes(payload))
        except FrameDecodeError as exc:
            log.warning("run %s: a recorded step does not decode: %s", run_id, exc)
            continue
        if step.run_id == run_id:
            key = (step.dispatch_id, step.name)
            latest.pop(key, None)  # the later record replaces it, in its place
            latest[key] = (int(rowid), step)
    if not latest:
        return {}
    dispatches = _json(sorted({d for d, _ in latest}))
    status = {str(d): str(s) for d, s in tx.fetch_all(_STATUS, (dispatches,))}
    kept = [(at, s) for at, s in latest.values() if status.get(s.dispatch_id) in _OPEN]
    stale = _set_aside_after(tx, [(at, s) for at, s in kept if s.error is not None])
    found: dict[str, list[StepRecorded]] = {}
    for at, step in kept:
        if step.error is None or (at, step.dispatch_id) not in stale:
            found.setdefault(step.run_id, []).append(step)
    return found


def _set_aside_after(tx: Tx, failed: list[tuple[int, StepRecorded]]) -> set[tuple[int, str]]:
    """Of these failures (event rowid, record), those whose dispatch was
    parked, or its run suspended on it, after them: ``(rowid, dispatch_id)``."""
    if not failed:
        return set()
    runs = sorted({s.run_id for _, s in failed})
    since = min(at for at, _ in failed)
    last: dict[str, int] = {}  # dispatch -> its latest park or suspension
    for rowid, kind, payload in tx.fetch_all(_SET_ASIDE, (since, _json(runs))):
        try:
            names = _names.decode(bytes(payload))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if kind == "RunSuspended" or names.outcome == _PARKED:
            last[names.dispatch_id] = int(rowid)
    return {(at, s.dispatch_id) for at, s in failed if last.get(s.dispatch_id, 0) > at}


def _json(values: Sequence[str]) -> str:
    return msgspec.json.encode(values).decode()
