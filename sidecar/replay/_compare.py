"""How a replayed handler call is compared with what the run recorded for its
item: its steps, an error on one side, its state, its effects and the run's
end, in that order; the first that differs is the item's difference.

Effects are compared in order, by what the handler asked for: a mail's
recipient, subject and body, and its other parts (html, cc, reply-to,
threading headers, extra headers, attachments: html and attachment data by
digest); a spawn's entrypoint and input; an approval's
prompt and whether it expires; a timer's name and payload, and its due
time unless the replayed call set it ``after=`` a delay (a time from the
clock at the call, never the same twice); a cancelled timer's name. Event
ids, times and child run ids are not compared.

Steps (``ctx.step``) are never called in a replay: each returns what the run
recorded. They differ when the call takes a step the run never took for the
item (the step raised ``StepNotRecorded``, whatever the handler did with
that), finds a recorded step at another place (``ctx.steps.moved``), or
returns without taking a step the run took (one removed or renamed).
"""

from __future__ import annotations

from typing import Any

import msgspec

from runtime import (
    DispatchOutcome,
    RecordedEffect,
    RecordedEnd,
    ReplayItem,
)
from runtime.sidecar_contract import ReplayDifference


class Call(msgspec.Struct, kw_only=True):
    """What one handler call did."""

    state: dict[str, Any]
    effects: list[RecordedEffect]
    end: RecordedEnd | None
    raised: str | None = None
    steps: list[str] = msgspec.field(default_factory=list)
    """The names of the steps the call took, in order."""
    moved: bool = False
    """A recorded step was found at another place than its recorded one."""


def canonical(value: Any) -> bytes:
    """One encoding per JSON value (keys sorted), so equal values compare equal
    however the handler ordered them, and ``True`` never equals ``1``."""
    return msgspec.json.encode(value, order="sorted")


def _same_effect(recorded: RecordedEffect, replayed: RecordedEffect) -> bool:
    if recorded.kind != replayed.kind:
        return False
    if recorded.kind == "mail":
        mail = (recorded.to, recorded.subject, recorded.body, canonical(recorded.rich))
        return mail == (replayed.to, replayed.subject, replayed.body, canonical(replayed.rich))
    if recorded.kind == "spawn":
        return recorded.entrypoint == replayed.entrypoint and canonical(
            recorded.input
        ) == canonical(replayed.input)
    if recorded.kind == "timer":
        due = replayed.due_at is None or replayed.due_at == recorded.due_at
        return (
            due
            and recorded.name == replayed.name
            and canonical(recorded.payload) == canonical(replayed.payload)
        )
    if recorded.kind == "timer_cancel":
        return recorded.name == replayed.name
    return (recorded.prompt, recorded.expires) == (replayed.prompt, replayed.expires)


def _same_effects(recorded: list[RecordedEffect], replayed: list[RecordedEffect]) -> bool:
    return len(recorded) == len(replayed) and all(map(_same_effect, recorded, replayed))


def _effect_view(effect: RecordedEffect) -> dict[str, Any]:
    """An effect as the report shows it: a mail body as text."""
    if effect.kind == "mail":
        body = effect.body.decode("utf-8", errors="replace")
        mail = {"kind": "mail", "to": effect.to, "subject": effect.subject, "body": body}
        return {**mail, **effect.rich}
    if effect.kind == "spawn":
        return {"kind": "spawn", "entrypoint": effect.entrypoint, "input": effect.input}
    if effect.kind == "timer":
        view = {"kind": "timer", "name": effect.name, "payload": effect.payload}
        return view if effect.due_at is None else {**view, "due_at": effect.due_at}
    if effect.kind == "timer_cancel":
        return {"kind": "timer_cancel", "name": effect.name}
    view = {"kind": effect.kind, "prompt": effect.prompt}
    return {**view, "expires": True} if effect.expires else view


def _end_view(end: RecordedEnd | None) -> dict[str, Any] | None:
    if end is None:
        return None
    if end.kind == "completed":
        return {"kind": "completed", "result": end.result}
    return {"kind": end.kind, "error": end.error}


def _steps_differ(item: ReplayItem, call: Call, *, taken_all: bool) -> bool:
    """A step taken that the run never took, or at another place; with
    ``taken_all``, also a step the run took that the call left out."""
    recorded = {s.name for s in item.steps}
    if call.moved or any(name not in recorded for name in call.steps):
        return True
    return taken_all and not recorded.issubset(call.steps)


def difference(item: ReplayItem, call: Call) -> ReplayDifference | None:
    """How ``call`` differs from what the run recorded for ``item``, if it does."""
    recorded = item.recorded
    what: str | None = None
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    failed = recorded.outcome in (DispatchOutcome.FAILED, DispatchOutcome.PARKED)
    steps = (
        "steps",
        {"steps": [s.name for s in item.steps]},
        {"steps": call.steps},
    )
    if _steps_differ(item, call, taken_all=False):
        # Before an error: a step without a record raises, and that step is
        # the news (the new code would call something the run never called).
        what, before, after = steps
    elif call.raised is not None:
        if not failed:
            what = "error"
            before = {"outcome": recorded.outcome, "state": recorded.state}
            after = {"raised": call.raised}
    elif failed:
        what = "error"
        before = {"outcome": recorded.outcome, "error": recorded.end.error if recorded.end else ""}
        after = {"outcome": DispatchOutcome.PROCESSED.value, "state": call.state}
    elif _steps_differ(item, call, taken_all=True):
        what, before, after = steps
    elif canonical(call.state) != canonical(recorded.state):
        what, before, after = "state", {"state": recorded.state}, {"state": call.state}
    elif not _same_effects(recorded.effects, call.effects):
        what = "effects"
        before = {"effects": [_effect_view(e) for e in recorded.effects]}
        after = {"effects": [_effect_view(e) for e in call.effects]}
    else:
        # A cancellation is not the handler's doing (a parent ended): not compared.
        end = recorded.end if recorded.end and recorded.end.kind != "cancelled" else None
        if canonical(_end_view(call.end)) != canonical(_end_view(end)):
            what, before, after = "end", {"end": _end_view(end)}, {"end": _end_view(call.end)}
    if what is None:
        return None
    return ReplayDifference(
        step=item.step,
        seq=item.seq,
        dispatch_id=item.dispatch_id,
        kind=item.kind,
        what=what,
        recorded=before,
        replayed=after,
    )
