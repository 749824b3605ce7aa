"""A run's events grouped by the item they belong to, as replay reads them:
each DispatchProcessed with the effects, steps and end of its handler call.

The sidecar commits each item's events together, in this order:
``[RunStarted]``, the effects (MailSent, ChildRunStarted, ApprovalRequested,
TimerSet, TimerCancelled), DispatchProcessed, ``[RunCompleted | RunFailed]``.
Effects belong to the DispatchProcessed after them, an end to the one before
it. A step's StepRecorded is written as the step returns, before its item
commits (a retry of the handler, or a crash, may come between), and names
its dispatch: it goes with that dispatch's item wherever it falls.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from runtime import (
    DispatchProcessed,
    Event,
    RecordedEffect,
    RecordedEnd,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
)
from runtime.sidecar_contract import effect_of
from runtime.wire import StepRecorded


@dataclass
class Group:
    """One DispatchProcessed with the events of its handler call."""

    processed: DispatchProcessed
    effects: list[RecordedEffect]
    end: RecordedEnd | None = None


@dataclass
class Grouped:
    """A run's events by item, in the run's processing order."""

    started: bool = False
    """Whether the run's RunStarted is among the events."""
    groups: list[Group] = field(default_factory=list)
    steps: dict[str, dict[str, StepRecorded]] = field(default_factory=dict)
    """By dispatch id, then by name: the steps recorded while it was processed."""

    def steps_of(self, dispatch_id: str) -> list[StepRecorded]:
        """The steps recorded for ``dispatch_id``, in their index order."""
        return sorted(self.steps.get(dispatch_id, {}).values(), key=lambda s: s.index)


def group_events(events: Iterable[Event]) -> Grouped:
    """Each DispatchProcessed with its effects, steps and end, from ``events``
    in the order the hub ingested them."""
    grouped = Grouped()
    effects: list[RecordedEffect] = []
    seen: set[str] = set()
    for event in events:
        if (effect := effect_of(event)) is not None:
            effects.append(effect)
        elif isinstance(event, RunStarted):
            grouped.started = True
        elif isinstance(event, StepRecorded):
            # Recorded twice (a new owner that had not seen the first record
            # when it took the run over): the first record counts, as the
            # first processing of a dispatch does.
            grouped.steps.setdefault(event.dispatch_id, {}).setdefault(event.name, event)
        elif isinstance(event, DispatchProcessed):
            if event.dispatch_id not in seen:
                seen.add(event.dispatch_id)
                grouped.groups.append(Group(event, effects))
            # Else the same item processed again (a new owner after a takeover):
            # the first processing is the one the hub applied.
            effects = []
        elif isinstance(event, RunCompleted | RunFailed | RunCancelled) and grouped.groups:
            last = grouped.groups[-1]
            if last.end is None:
                last.end = _end(event)
    if all(g.processed.step > 0 for g in grouped.groups):
        # The run's processing order (an approval decision overtakes the items
        # its gate held); an older sidecar sends no step: ingestion order.
        grouped.groups.sort(key=lambda g: g.processed.step)
    return grouped


def _end(event: RunCompleted | RunFailed | RunCancelled) -> RecordedEnd:
    if isinstance(event, RunCompleted):
        return RecordedEnd(kind="completed", result=event.result)
    if isinstance(event, RunFailed):
        return RecordedEnd(kind="failed", error=event.error)
    return RecordedEnd(kind="cancelled", error=event.reason)
