"""DispatchProcessed events, the bulk of every frame, applied as one batch.

A sidecar reports each item it processed with a DispatchProcessed, so a
frame is mostly a run of them. Applied one at a time they cost six
statements each on the hub's only writer; applied as a batch, a run of them
costs a few statements in all (the store's ``read_processed`` and
``write_processed``): one read each of the events already recorded, the
runs and the dispatches they name, then writes of many rows a statement.

The outcome is that of applying them one at a time in frame order (the
rules are in :mod:`hub.wire.events.events`): every decision is made here, in
memory, in order, against rows read once and updated as each event is
decided, and each run's row is written once, with the state of the last
event that moved it. Only the single writer changes these rows, inside this
transaction, so what was read stays true until the writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runtime import DispatchOutcome, DispatchProcessed, Event, Reason, encode
from runtime.config import DEFAULT_RUN_HISTORY

from ..._errors import UnknownDispatch
from ...store import (
    OPEN_DISPATCH,
    DispatchStatus,
    DispatchToSettle,
    NewRunEvent,
    RunMoved,
    SettledDispatch,
    Tx,
    body_digest,
    read_processed,
    write_processed,
)

SetAside = Callable[[Event, str], None]
"""What becomes of an event that cannot be applied: a dead letter, for a reason."""


def trim_every(keep: int) -> int:
    """Steps of a run between two trims of its history (``keep`` events):
    a quarter of it, so a run holds at most ``keep + trim_every(keep) - 1``
    payloads (a history under 8 is trimmed at every step, as before)."""
    return max(1, keep // 4)


@dataclass
class _Run:
    last_seq: int
    last_step: int
    moved: bool = False  # last_seq/last_step changed
    state: dict[str, Any] | None = None  # set by the last event that moved it
    version: int = 0  # the last non-zero version among those events
    resume: bool = False  # it processed an approval decision
    pending: bool = True  # not started when read


class ProcessedBatch:
    """One run of consecutive DispatchProcessed events of a frame, inside
    the frame's write transaction."""

    def __init__(
        self,
        tx: Tx,
        deployment_id: str,
        now: float,
        dead_letter: SetAside,
        *,
        keep: int = DEFAULT_RUN_HISTORY,
    ) -> None:
        self.tx = tx
        self.deployment_id = deployment_id
        self.now = now
        self.dead_letter = dead_letter
        self.keep = keep
        """The run history's length (``trim_history``'s ``keep``)."""
        self.runs_with_events: set[str] = set()
        """Runs that got new events."""
        self.due: set[str] = set()
        """Runs whose history is trimmed in this transaction: one got a
        payload that did not move its step, or its step passed a multiple of
        ``trim_every``. The step only grows (its one writer is this batch),
        so between two trims a run gains fewer payloads than that."""
        self.settled_after: list[float] = []
        """Seconds from acceptance of each dispatch this batch settled."""
        self._closed: set[str] = set()  # dispatches this batch settled

    def apply(self, events: Sequence[DispatchProcessed]) -> bool:
        """Record and apply the new ones; True when one freed a claim-checked body."""
        found = read_processed(
            self.tx,
            self.deployment_id,
            [e.event_id for e in events],
            list({e.run_id for e in events}),
            [e.dispatch_id for e in events],
        )
        recorded = found.recorded
        runs = {
            run_id: _Run(position.last_seq, position.last_step, pending=position.pending)
            for run_id, position in found.runs.items()
        }
        fresh: list[DispatchProcessed] = []
        for event in events:
            if event.run_id not in runs:
                self.dead_letter(event, "foreign_run")
            elif event.event_id not in recorded:
                recorded.add(event.event_id)
                fresh.append(event)
        # A run's history keeps its ``keep`` latest events: the batch's new
        # events before its run's last ``keep`` are recorded without their
        # payload (and settle without their inline body) rather than written
        # whole and trimmed in the same transaction (trim_history).
        later = Counter(event.run_id for event in fresh)
        new_events: list[NewRunEvent] = []
        settled: list[SettledDispatch] = []
        released = False
        unpaced: set[str] = set()
        for event in fresh:
            later[event.run_id] -= 1
            trimmed = later[event.run_id] >= self.keep
            self.runs_with_events.add(event.run_id)
            dispatch = found.dispatches.get(event.dispatch_id)
            run = runs[event.run_id]
            stepped = run.last_step
            if dispatch is None or dispatch.run_id != event.run_id:
                self.dead_letter(event, UnknownDispatch.reason)
            else:
                # An event of a dispatch settled before is recorded whole:
                # trim_history takes its payload and the dispatch's body.
                trimmed = trimmed and self._open(event.dispatch_id, dispatch)
                released |= self._decide(event, run, dispatch, settled, trimmed)
            if not trimmed and not (event.step and run.last_step == event.step > stepped):
                unpaced.add(event.run_id)  # a payload its run's step does not count
            new_events.append(
                (
                    event.event_id,
                    event.run_id,
                    self.deployment_id,
                    "DispatchProcessed",
                    None if trimmed else encode(event),
                    event.at or self.now,
                )
            )
        moved = [
            RunMoved(run_id, run.last_seq, run.last_step, run.state, run.version, run.pending)
            for run_id, run in runs.items()
            if run.moved
        ]
        resumed = [run_id for run_id, run in runs.items() if run.resume]
        write_processed(self.tx, self.now, new_events, moved, resumed, settled)
        every = trim_every(self.keep)
        self.due |= {
            run_id
            for run_id in self.runs_with_events
            if run_id in unpaced
            or found.runs[run_id].last_step // every != runs[run_id].last_step // every
        }
        return released

    def _open(self, dispatch_id: str, dispatch: DispatchToSettle) -> bool:
        """Whether the dispatch is open still: as read, and not settled by
        an earlier event of this batch."""
        return dispatch.status in OPEN_DISPATCH and dispatch_id not in self._closed

    def _decide(
        self,
        event: DispatchProcessed,
        run: _Run,
        dispatch: DispatchToSettle,
        settled: list[SettledDispatch],
        trimmed: bool,
    ) -> bool:
        # The hub's own seq for the dispatch is authoritative (a v1-era event
        # may not carry one).
        refused = event.outcome == DispatchOutcome.REFUSED_TERMINAL
        newer = event.step > run.last_step if event.step else dispatch.seq > run.last_seq
        if newer:
            run.last_seq = max(dispatch.seq, run.last_seq)
            run.last_step = event.step
            run.moved = True
            if not refused:
                run.state = event.state
                run.version = event.version or run.version
        if dispatch.kind == "approval":
            run.resume = True
        if not self._open(event.dispatch_id, dispatch):
            return False
        # Even an out-of-order event settles its dispatch: the sidecar did
        # process it, and redelivering it would only be refused as duplicate.
        failure = event.error or None
        if refused:
            status, error = DispatchStatus.CANCELLED.value, Reason.WORKFLOW_RUN_TERMINAL.value
        elif event.outcome == DispatchOutcome.PARKED:
            # Set aside, not done with: its body stays for a retry.
            status, error, trimmed = DispatchStatus.PARKED.value, None, False
        else:
            status, error = DispatchStatus.PROCESSED.value, None
        self._closed.add(event.dispatch_id)
        self.settled_after.append(max(0.0, self.now - float(dispatch.created_at)))
        # Applied, never sent again: an inline body stays while the run's
        # history holds this item (replay reads it; retention.trim_history
        # drops it after), its digest and size for good, for a retry's
        # same-content check (hub.md, "Retention"). The digest goes in a
        # column of its own: body_digest's index is for claim checks, and a
        # random key per processed mail would cost each settle a page.
        inline = dispatch.body_digest is None
        digest = body_digest(bytes(dispatch.body or b"")) if inline else None
        settled.append(
            (
                status,
                self.now,
                error,
                event.version,
                digest,
                int(trimmed),
                failure,
                event.dispatch_id,
            )
        )
        if status == DispatchStatus.PARKED:
            return False  # its blobs stay while it is parked
        # A claim-checked body or a raw message: its blob may go.
        return not inline or dispatch.raw_digest is not None
